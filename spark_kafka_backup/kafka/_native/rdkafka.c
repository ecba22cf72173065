/* Opening librdkafka by path and taking its functions by name (see rdkafka.h). */
#include <dlfcn.h>
#include <string.h>

#include "rdkafka.h"

rdkafka_api rk;
int rk_loaded = 0;

PyObject *native_load(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "cannot open %s: %s", path, dlerror());
        return NULL;
    }
#define TAKE(field, name)                                                                   \
    if ((*(void **)&rk.field = dlsym(lib, name)) == NULL) {                                 \
        PyErr_Format(PyExc_OSError, "%s has no %s: not a librdkafka this module knows", path, name); \
        return NULL;                                                                        \
    }
    TAKE(version, "rd_kafka_version");
    TAKE(conf_new, "rd_kafka_conf_new");
    TAKE(conf_destroy, "rd_kafka_conf_destroy");
    TAKE(conf_set, "rd_kafka_conf_set");
    TAKE(new_, "rd_kafka_new");
    TAKE(destroy, "rd_kafka_destroy");
    TAKE(consumer_close, "rd_kafka_consumer_close");
    TAKE(list_new, "rd_kafka_topic_partition_list_new");
    TAKE(list_add, "rd_kafka_topic_partition_list_add");
    TAKE(list_destroy, "rd_kafka_topic_partition_list_destroy");
    TAKE(assign, "rd_kafka_assign");
    TAKE(incremental_assign, "rd_kafka_incremental_assign");
    TAKE(incremental_unassign, "rd_kafka_incremental_unassign");
    TAKE(queue_get_consumer, "rd_kafka_queue_get_consumer");
    TAKE(poll_set_consumer, "rd_kafka_poll_set_consumer");
    TAKE(queue_destroy, "rd_kafka_queue_destroy");
    TAKE(consume_batch_queue, "rd_kafka_consume_batch_queue");
    TAKE(message_destroy, "rd_kafka_message_destroy");
    TAKE(message_timestamp, "rd_kafka_message_timestamp");
    TAKE(message_headers, "rd_kafka_message_headers");
    TAKE(header_cnt, "rd_kafka_header_cnt");
    TAKE(header_get_all, "rd_kafka_header_get_all");
    TAKE(topic_name, "rd_kafka_topic_name");
    TAKE(err2str, "rd_kafka_err2str");
    TAKE(query_watermark_offsets, "rd_kafka_query_watermark_offsets");
    TAKE(conf_set_dr_msg_cb, "rd_kafka_conf_set_dr_msg_cb");
    TAKE(conf_set_error_cb, "rd_kafka_conf_set_error_cb");
    TAKE(conf_set_opaque, "rd_kafka_conf_set_opaque");
    TAKE(producev, "rd_kafka_producev");
    TAKE(poll, "rd_kafka_poll");
    TAKE(flush, "rd_kafka_flush");
    TAKE(outq_len, "rd_kafka_outq_len");
    TAKE(headers_new, "rd_kafka_headers_new");
    TAKE(headers_destroy, "rd_kafka_headers_destroy");
    TAKE(header_add, "rd_kafka_header_add");
    TAKE(fatal_error, "rd_kafka_fatal_error");
    TAKE(init_transactions, "rd_kafka_init_transactions");
    TAKE(begin_transaction, "rd_kafka_begin_transaction");
    TAKE(commit_transaction, "rd_kafka_commit_transaction");
    TAKE(abort_transaction, "rd_kafka_abort_transaction");
    TAKE(send_offsets_to_transaction, "rd_kafka_send_offsets_to_transaction");
    TAKE(group_metadata_new, "rd_kafka_consumer_group_metadata_new");
    TAKE(group_metadata_destroy, "rd_kafka_consumer_group_metadata_destroy");
    TAKE(error_code, "rd_kafka_error_code");
    TAKE(error_string, "rd_kafka_error_string");
    TAKE(error_is_fatal, "rd_kafka_error_is_fatal");
    TAKE(error_is_retriable, "rd_kafka_error_is_retriable");
    TAKE(error_txn_requires_abort, "rd_kafka_error_txn_requires_abort");
    TAKE(error_destroy, "rd_kafka_error_destroy");
#undef TAKE
    int version = rk.version();
    if (version < 0x01090000) {
        PyErr_Format(PyExc_OSError, "%s is librdkafka 0x%08x: 1.9 or newer is needed", path, version);
        return NULL;
    }
    rk_loaded = 1;
    return PyLong_FromLong(version);
}

rd_kafka_conf_t *native_conf(PyObject *settings) {
    char error[512];
    rd_kafka_conf_t *conf = rk.conf_new();
    PyObject *key, *value;
    Py_ssize_t at = 0;
    while (PyDict_Next(settings, &at, &key, &value)) {
        const char *k = PyUnicode_AsUTF8(key), *v = k ? PyUnicode_AsUTF8(value) : NULL;
        if (v == NULL) {
            rk.conf_destroy(conf);
            return NULL;
        }
        if (rk.conf_set(conf, k, v, error, sizeof error) != RD_KAFKA_CONF_OK) {
            rk.conf_destroy(conf);
            PyErr_Format(PyExc_ValueError, "client setting %s: %s", k, error);
            return NULL;
        }
    }
    return conf;
}

rd_kafka_conf_t *conf_argument(PyObject *args) {
    PyObject *settings;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &settings))
        return NULL;
    if (!rk_loaded) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka is not loaded (load() first)");
        return NULL;
    }
    return native_conf(settings);
}

/* error_text(code) -> librdkafka's description of an error code. */
PyObject *native_error_text(PyObject *self, PyObject *args) {
    int code;
    if (!PyArg_ParseTuple(args, "i", &code))
        return NULL;
    if (!rk_loaded) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka is not loaded (load() first)");
        return NULL;
    }
    return PyUnicode_DecodeUTF8(rk.err2str(code), (Py_ssize_t)strlen(rk.err2str(code)), "replace");
}
