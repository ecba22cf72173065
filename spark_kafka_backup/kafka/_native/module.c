/* The native Kafka edge as one Python module: spark_kafka_backup.kafka._native_kafka (see columnar.py). */
#include "rdkafka.h"

#include <string.h>

static PyMethodDef methods[] = {
    {"load", native_load, METH_VARARGS, "load(path) -> librdkafka version: open librdkafka and take its functions"},
    {"error_text", native_error_text, METH_VARARGS, "error_text(code) -> librdkafka's description of the code"},
    {"consumer", consumer_new, METH_VARARGS, "consumer(settings) -> a consumer (capsule)"},
    {"assign", consumer_assign, METH_VARARGS, "assign(consumer, topic, partition, offset)"},
    {"add", consumer_add, METH_VARARGS, "add(consumer, [(topic, partition, offset, end)]): read these too"},
    {"remove", consumer_remove, METH_VARARGS, "remove(consumer, topic, partition): stop reading a partition"},
    {"poll", consumer_poll, METH_VARARGS, "poll(consumer, max_rows, timeout_ms, end, max_bytes) -> Polled"},
    {"watermarks", consumer_watermarks, METH_VARARGS, "watermarks(consumer, topic, partition, timeout_ms) -> Watermarks"},
    {"close", consumer_close, METH_VARARGS, "close(consumer)"},
    {"producer", producer_new, METH_VARARGS, "producer(settings) -> a producer (capsule)"},
    {"produce", (PyCFunction)(void (*)(void))producer_produce, METH_VARARGS | METH_KEYWORDS,
     "produce(producer, topic, partition, first_index, rows, header_count, 14 buffers by name) -> Produced"},
    {"wait", producer_wait, METH_VARARGS, "wait(producer, flush, timeout_ms) -> in flight (flush) or served"},
    {"deliveries", producer_deliveries, METH_VARARGS, "deliveries(producer, forget_below) -> Reports"},
    {"transaction", producer_transaction, METH_VARARGS, "transaction(producer, what, timeout_ms) -> Refusal or None"},
    {"send_offsets", producer_send_offsets, METH_VARARGS, "send_offsets(producer, ...) -> Refusal or None"},
    {"close_producer", producer_close, METH_VARARGS, "close_producer(producer)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_kafka", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyTypeObject *ColumnBuffersType, *PolledType, *WatermarksType, *ProducedType, *ReportsType, *RefusalType;

static PyStructSequence_Field column_buffer_fields[] = {
    {"offsets", NULL}, {"timestamps", NULL}, {"kinds", NULL}, {"key_valid", NULL}, {"key_offsets", NULL},
    {"key_data", NULL}, {"value_valid", NULL}, {"value_offsets", NULL}, {"value_data", NULL}, {"headers_valid", NULL},
    {"headers_offsets", NULL}, {"header_key_offsets", NULL}, {"header_key_data", NULL},
    {"header_value_valid", NULL}, {"header_value_offsets", NULL}, {"header_value_data", NULL}, {NULL, NULL}};
static PyStructSequence_Field polled_fields[] = {
    {"rows", NULL}, {"header_count", NULL}, {"buffers", NULL}, {"event", NULL}, {"event_offset", NULL},
    {"event_text", NULL}, {"topic", NULL}, {"partition", NULL}, {NULL, NULL}};
static PyStructSequence_Field watermarks_fields[] = {{"low", NULL}, {"high", NULL}, {NULL, NULL}};
static PyStructSequence_Field produced_fields[] = {{"produced", NULL}, {"error_code", NULL}, {NULL, NULL}};
static PyStructSequence_Field reports_fields[] = {
    {"reported", NULL}, {"last_offset", NULL}, {"base", NULL}, {"offsets", NULL}, {"failures", NULL},
    {"failures_dropped", NULL}, {"fatal", NULL}, {NULL, NULL}};
static PyStructSequence_Field refusal_fields[] = {
    {"code", NULL}, {"text", NULL}, {"fatal", NULL}, {"retriable", NULL}, {"requires_abort", NULL}, {NULL, NULL}};

static PyStructSequence_Desc descriptions[] = {
    {"_native_kafka.ColumnBuffers", "a polled batch's Arrow buffers", column_buffer_fields, 16},
    {"_native_kafka.Polled", "what one poll read", polled_fields, 8},
    {"_native_kafka.Watermarks", "a partition's low and high watermarks", watermarks_fields, 2},
    {"_native_kafka.Produced", "how many rows were queued, and the code that stopped it", produced_fields, 2},
    {"_native_kafka.Reports", "the delivery reports so far", reports_fields, 7},
    {"_native_kafka.Refusal", "librdkafka's error of a call", refusal_fields, 5},
};

PyObject *named(PyTypeObject *type, PyObject *tuple) {
    if (tuple == NULL)
        return NULL;
    PyObject *result = PyStructSequence_New(type);
    if (result != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
            PyObject *item = PyTuple_GET_ITEM(tuple, i);
            Py_INCREF(item);
            PyStructSequence_SetItem(result, i, item);
        }
    }
    Py_DECREF(tuple);
    return result;
}

PyMODINIT_FUNC PyInit__native_kafka(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyTypeObject **types[] = {&ColumnBuffersType, &PolledType, &WatermarksType, &ProducedType, &ReportsType,
                              &RefusalType};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        *types[i] = PyStructSequence_NewType(&descriptions[i]);
        const char *name = strrchr(descriptions[i].name, '.') + 1;
        if (*types[i] == NULL || PyModule_AddObjectRef(m, name, (PyObject *)*types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
