/* The native Kafka edge as one Python module: spark_kafka_backup.kafka._native_kafka (see columnar.py). */
#include "rdkafka.h"

static PyMethodDef methods[] = {
    {"load", native_load, METH_VARARGS, "load(path) -> librdkafka version: open librdkafka and take its functions"},
    {"error_text", native_error_text, METH_VARARGS, "error_text(code) -> librdkafka's description of the code"},
    {"consumer", consumer_new, METH_VARARGS, "consumer(settings) -> a consumer (capsule)"},
    {"assign", consumer_assign, METH_VARARGS, "assign(consumer, topic, partition, offset)"},
    {"add", consumer_add, METH_VARARGS, "add(consumer, [(topic, partition, offset, end)]): read these too"},
    {"remove", consumer_remove, METH_VARARGS, "remove(consumer, topic, partition): stop reading a partition"},
    {"poll", consumer_poll, METH_VARARGS,
     "poll(consumer, max_rows, timeout_ms, end, max_bytes) -> columns, event, topic, partition"},
    {"watermarks", consumer_watermarks, METH_VARARGS, "watermarks(consumer, topic, partition, timeout_ms)"},
    {"close", consumer_close, METH_VARARGS, "close(consumer)"},
    {"producer", producer_new, METH_VARARGS, "producer(settings) -> a producer (capsule)"},
    {"produce", producer_produce, METH_VARARGS, "produce(producer, topic, partition, first_index, rows, buffers)"},
    {"wait", producer_wait, METH_VARARGS, "wait(producer, flush, timeout_ms) -> in flight (flush) or served"},
    {"deliveries", producer_deliveries, METH_VARARGS, "deliveries(producer, first, count) -> reports"},
    {"transaction", producer_transaction, METH_VARARGS, "transaction(producer, what, timeout_ms) -> error"},
    {"send_offsets", producer_send_offsets, METH_VARARGS, "send_offsets(producer, ...) -> error"},
    {"close_producer", producer_close, METH_VARARGS, "close_producer(producer)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_kafka", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native_kafka(void) { return PyModule_Create(&module); }
