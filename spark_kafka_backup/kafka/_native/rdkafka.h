/* The part of librdkafka's public, stable ABI (rdkafka.h) the native Kafka edge uses, and its function table.
 *
 * Nothing links against librdkafka: load() opens the library confluent-kafka runs (by path) and fills ``rk``.
 */
#ifndef KBACKUP_NATIVE_RDKAFKA_H
#define KBACKUP_NATIVE_RDKAFKA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;

typedef struct {
    int err; /* rd_kafka_resp_err_t */
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

typedef struct {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    int err;
    void *_private;
} rd_kafka_topic_partition_t;

typedef struct {
    int cnt;
    int size;
    rd_kafka_topic_partition_t *elems;
} rd_kafka_topic_partition_list_t;

enum { RD_KAFKA_CONSUMER = 1, RD_KAFKA_CONF_OK = 0, RD_KAFKA_RESP_ERR__NOENT = -156 };

typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef struct rd_kafka_consumer_group_metadata_s rd_kafka_consumer_group_metadata_t;

enum {
    RD_KAFKA_PRODUCER = 0,
    RD_KAFKA_RESP_ERR__QUEUE_FULL = -184,
    RD_KAFKA_VTYPE_END = 0,
    RD_KAFKA_VTYPE_TOPIC = 1,
    RD_KAFKA_VTYPE_PARTITION = 3,
    RD_KAFKA_VTYPE_VALUE = 4,
    RD_KAFKA_VTYPE_KEY = 5,
    RD_KAFKA_VTYPE_OPAQUE = 6,
    RD_KAFKA_VTYPE_MSGFLAGS = 7,
    RD_KAFKA_VTYPE_TIMESTAMP = 8,
    RD_KAFKA_VTYPE_HEADERS = 10,
    RD_KAFKA_MSG_F_COPY = 0x2,
};

typedef struct {
    int (*version)(void);
    rd_kafka_conf_t *(*conf_new)(void);
    void (*conf_destroy)(rd_kafka_conf_t *);
    int (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    rd_kafka_t *(*new_)(int, rd_kafka_conf_t *, char *, size_t);
    void (*destroy)(rd_kafka_t *);
    int (*consumer_close)(rd_kafka_t *);
    rd_kafka_topic_partition_list_t *(*list_new)(int);
    rd_kafka_topic_partition_t *(*list_add)(rd_kafka_topic_partition_list_t *, const char *, int32_t);
    void (*list_destroy)(rd_kafka_topic_partition_list_t *);
    int (*assign)(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
    rd_kafka_error_t *(*incremental_assign)(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
    rd_kafka_error_t *(*incremental_unassign)(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
    rd_kafka_queue_t *(*queue_get_consumer)(rd_kafka_t *);
    int (*poll_set_consumer)(rd_kafka_t *);
    void (*queue_destroy)(rd_kafka_queue_t *);
    ssize_t (*consume_batch_queue)(rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t);
    void (*message_destroy)(rd_kafka_message_t *);
    int64_t (*message_timestamp)(const rd_kafka_message_t *, int *);
    int (*message_headers)(const rd_kafka_message_t *, rd_kafka_headers_t **);
    size_t (*header_cnt)(const rd_kafka_headers_t *);
    int (*header_get_all)(const rd_kafka_headers_t *, size_t, const char **, const void **, size_t *);
    const char *(*topic_name)(const rd_kafka_topic_t *);
    const char *(*err2str)(int);
    int (*query_watermark_offsets)(rd_kafka_t *, const char *, int32_t, int64_t *, int64_t *, int);
    /* the producer */
    void (*conf_set_dr_msg_cb)(rd_kafka_conf_t *, void (*)(rd_kafka_t *, const rd_kafka_message_t *, void *));
    void (*conf_set_error_cb)(rd_kafka_conf_t *, void (*)(rd_kafka_t *, int, const char *, void *));
    void (*conf_set_opaque)(rd_kafka_conf_t *, void *);
    int (*producev)(rd_kafka_t *, ...);
    int (*poll)(rd_kafka_t *, int);
    int (*flush)(rd_kafka_t *, int);
    int (*outq_len)(rd_kafka_t *);
    rd_kafka_headers_t *(*headers_new)(size_t);
    void (*headers_destroy)(rd_kafka_headers_t *);
    int (*header_add)(rd_kafka_headers_t *, const char *, ssize_t, const void *, ssize_t);
    int (*fatal_error)(rd_kafka_t *, char *, size_t);
    rd_kafka_error_t *(*init_transactions)(rd_kafka_t *, int);
    rd_kafka_error_t *(*begin_transaction)(rd_kafka_t *);
    rd_kafka_error_t *(*commit_transaction)(rd_kafka_t *, int);
    rd_kafka_error_t *(*abort_transaction)(rd_kafka_t *, int);
    rd_kafka_error_t *(*send_offsets_to_transaction)(rd_kafka_t *, const rd_kafka_topic_partition_list_t *,
                                                     const rd_kafka_consumer_group_metadata_t *, int);
    rd_kafka_consumer_group_metadata_t *(*group_metadata_new)(const char *);
    void (*group_metadata_destroy)(rd_kafka_consumer_group_metadata_t *);
    int (*error_code)(const rd_kafka_error_t *);
    const char *(*error_string)(const rd_kafka_error_t *);
    int (*error_is_fatal)(const rd_kafka_error_t *);
    int (*error_is_retriable)(const rd_kafka_error_t *);
    int (*error_txn_requires_abort)(const rd_kafka_error_t *);
    void (*error_destroy)(rd_kafka_error_t *);
} rdkafka_api;


extern rdkafka_api rk;
extern int rk_loaded;

PyObject *native_load(PyObject *self, PyObject *args);
PyObject *native_error_text(PyObject *self, PyObject *args);

PyObject *consumer_new(PyObject *self, PyObject *args);
PyObject *consumer_assign(PyObject *self, PyObject *args);
PyObject *consumer_add(PyObject *self, PyObject *args);
PyObject *consumer_remove(PyObject *self, PyObject *args);
PyObject *consumer_poll(PyObject *self, PyObject *args);
PyObject *consumer_watermarks(PyObject *self, PyObject *args);
PyObject *consumer_close(PyObject *self, PyObject *args);

PyObject *producer_new(PyObject *self, PyObject *args);
PyObject *producer_produce(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *producer_wait(PyObject *self, PyObject *args);
PyObject *producer_deliveries(PyObject *self, PyObject *args);
PyObject *producer_transaction(PyObject *self, PyObject *args);
PyObject *producer_send_offsets(PyObject *self, PyObject *args);
PyObject *producer_close(PyObject *self, PyObject *args);

/* The module's named results (struct sequences: tuples whose items also have names; _native_kafka.pyi types them),
 * made at import. */
extern PyTypeObject *ColumnBuffersType, *PolledType, *WatermarksType, *ProducedType, *ReportsType, *RefusalType;
/* ``tuple``'s items as an instance of ``type`` (steals the tuple; NULL stays NULL). */
PyObject *named(PyTypeObject *type, PyObject *tuple);

/* A librdkafka configuration from a dict of str to str; NULL with a Python error set. */
rd_kafka_conf_t *native_conf(PyObject *settings);
/* The same from a call's only argument (the settings dict), once librdkafka is loaded. */
rd_kafka_conf_t *conf_argument(PyObject *args);

#endif
