/*
 * The native Kafka edge's producer: records produced from Arrow column buffers, delivery reports kept in C.
 *
 * produce() takes a batch of rows as the buffers of Arrow arrays (keys and values: binary, validity bitmaps LSB
 * first or None for all valid, int32 offsets; timestamps: int64 milliseconds, -1 for none; headers:
 * list<struct<key: string, value: binary>>, or None for none at all) and gives every row to librdkafka
 * (copied: the buffers are free when it returns), numbered by a delivery index the caller chooses. librdkafka
 * reports each delivery to a C callback: the count, the last offset, each record's offset by its index, and the
 * failures (index and error code) are kept here and read with deliveries(); no Python runs per record.
 *
 * Transactions, fencing and the marker offsets go through librdkafka's transactional API: transaction() and
 * send_offsets() return None, or the error as (code, text, fatal, retriable, requires_abort).
 *
 * Every offset and length in the buffers is checked against its buffer before it is read: a wrong buffer is a
 * ValueError naming the row, never a read out of bounds.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "rdkafka.h"

#define FAILURES_KEPT 10000
/* At most this many delivery indexes from ``base`` on (128 MiB of offsets): forget what a commit settled. */
#define WINDOW_MAX ((int64_t)1 << 24)

typedef struct {
    int64_t index;
    int32_t code;
} failure_t;

typedef struct {
    rd_kafka_t *handle;
    pthread_mutex_t lock; /* the delivery log: reports are served on whichever thread polls */
    int64_t reported;
    int64_t last_offset;
    int64_t base;      /* delivery index of offsets[0] */
    int64_t *offsets;  /* offset of each delivered record from base on (-1: not delivered) */
    size_t offsets_size, offsets_capacity;
    failure_t failures[FAILURES_KEPT];
    size_t failure_count;
    int64_t failures_dropped;
} producer_t;

static const char *CAPSULE = "spark_kafka_backup.native_kafka.producer";

static void on_delivery(rd_kafka_t *handle, const rd_kafka_message_t *m, void *opaque) {
    producer_t *p = opaque;
    int64_t index = (int64_t)(intptr_t)m->_private;
    pthread_mutex_lock(&p->lock);
    p->reported++;
    if (m->err) {
        if (p->failure_count < FAILURES_KEPT) {
            p->failures[p->failure_count].index = index;
            p->failures[p->failure_count].code = m->err;
            p->failure_count++;
        } else {
            p->failures_dropped++;
        }
        if (index >= p->base && (size_t)(index - p->base) < p->offsets_capacity)
            p->offsets[index - p->base] = -1;
    } else {
        p->last_offset = m->offset;
        /* produce() made room for every index it queued: one out of the window was forgotten, or never queued. */
        if (index >= p->base && (size_t)(index - p->base) < p->offsets_capacity) {
            size_t at = (size_t)(index - p->base);
            p->offsets[at] = m->offset;
            if (at + 1 > p->offsets_size)
                p->offsets_size = at + 1;
        }
    }
    pthread_mutex_unlock(&p->lock);
}

/* Errors are read where they matter (delivery reports, rd_kafka_fatal_error()); without this callback librdkafka
   would print each one. */
static void on_error(rd_kafka_t *handle, int code, const char *reason, void *opaque) {
    (void)handle, (void)code, (void)reason, (void)opaque;
}

static void producer_free(producer_t *p) {
    if (p->handle != NULL)
        rk.destroy(p->handle);
    pthread_mutex_destroy(&p->lock);
    free(p->offsets);
    free(p);
}

static void capsule_destructor(PyObject *capsule) {
    producer_t *p = PyCapsule_GetPointer(capsule, CAPSULE);
    if (p != NULL) {
        Py_BEGIN_ALLOW_THREADS
        producer_free(p);
        Py_END_ALLOW_THREADS
    }
}

static producer_t *producer_of(PyObject *capsule) {
    producer_t *p = PyCapsule_GetPointer(capsule, CAPSULE);
    if (p != NULL && p->handle == NULL) {
        PyErr_SetString(PyExc_ValueError, "the producer is closed");
        return NULL;
    }
    return p;
}

/* producer(settings: dict[str, str]) -> capsule */
PyObject *producer_new(PyObject *self, PyObject *args) {
    rd_kafka_conf_t *conf = conf_argument(args);
    if (conf == NULL)
        return NULL;
    producer_t *p = calloc(1, sizeof *p);
    if (p == NULL) {
        rk.conf_destroy(conf);
        return PyErr_NoMemory();
    }
    pthread_mutex_init(&p->lock, NULL);
    p->last_offset = -1;
    rk.conf_set_dr_msg_cb(conf, on_delivery);
    rk.conf_set_error_cb(conf, on_error);
    rk.conf_set_opaque(conf, p);
    char error[512];
    p->handle = rk.new_(RD_KAFKA_PRODUCER, conf, error, sizeof error);
    if (p->handle == NULL) {
        rk.conf_destroy(conf);
        producer_free(p);
        PyErr_Format(PyExc_ValueError, "cannot create a producer: %s", error);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(p, CAPSULE, capsule_destructor);
    if (capsule == NULL)
        producer_free(p);
    return capsule;
}

/* A buffer argument: None (absent) or an object with the buffer protocol; ``view->buf`` NULL when absent. */
static int take_buffer(PyObject *object, Py_buffer *view) {
    memset(view, 0, sizeof *view);
    if (object == Py_None)
        return 0;
    return PyObject_GetBuffer(object, view, PyBUF_SIMPLE);
}

static int bit(const Py_buffer *bitmap, Py_ssize_t i) {
    return bitmap->buf == NULL || ((((const uint8_t *)bitmap->buf)[i >> 3] >> (i & 7)) & 1);
}

/* Offsets [i] and [i + 1] of an int32 offsets buffer, checked against the data's length. */
static int span(const Py_buffer *offsets, const Py_buffer *data, Py_ssize_t i, int32_t *start, int32_t *end) {
    const int32_t *o = offsets->buf;
    *start = o[i];
    *end = o[i + 1];
    return *start >= 0 && *start <= *end && (Py_ssize_t)*end <= data->len;
}

/* Room in the offsets log for delivery indexes [first, first + rows): -1 when they are outside the window from
 * ``base``, -2 when memory runs out. Called with the lock held. */
static int make_room(producer_t *p, int64_t first, int64_t rows) {
    if (first < p->base || rows < 0 || first - p->base > WINDOW_MAX - rows)
        return -1;
    size_t needed = (size_t)(first - p->base + rows);
    if (needed <= p->offsets_capacity)
        return 0;
    size_t capacity = p->offsets_capacity ? p->offsets_capacity : 1024;
    while (capacity < needed)
        capacity *= 2;
    int64_t *grown = realloc(p->offsets, capacity * sizeof *grown);
    if (grown == NULL)
        return -2;
    for (size_t i = p->offsets_capacity; i < capacity; i++)
        grown[i] = -1;
    p->offsets = grown;
    p->offsets_capacity = capacity;
    return 0;
}

enum { P_KEY_VALID, P_KEY_OFFSETS, P_KEY_DATA, P_VALUE_VALID, P_VALUE_OFFSETS, P_VALUE_DATA, P_TIMESTAMPS,
       P_HEADERS_VALID, P_HEADERS_OFFSETS, P_HEADER_KEY_OFFSETS, P_HEADER_KEY_DATA, P_HEADER_VALUE_VALID,
       P_HEADER_VALUE_OFFSETS, P_HEADER_VALUE_DATA, P_COUNT };

/*
 * produce(producer, topic, partition, first_index, rows, headers, 14 buffers) -> (produced, error_code)
 *
 * ``headers``: how many header entries the header buffers hold. Produces rows in order until all are queued
 * (error_code 0) or librdkafka refuses one for another reason than a full queue (its code; ``produced`` rows
 * were queued). A full queue is waited out by serving delivery reports.
 */
PyObject *producer_produce(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"producer", "topic", "partition", "first_index", "rows", "header_count", "key_valid",
                            "key_offsets", "key_data", "value_valid", "value_offsets", "value_data", "timestamps",
                            "headers_valid", "headers_offsets", "header_key_offsets", "header_key_data",
                            "header_value_valid", "header_value_offsets", "header_value_data", NULL};
    PyObject *capsule, *objects[P_COUNT];
    const char *topic;
    int partition;
    long long first_index;
    Py_ssize_t rows, header_count;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OsiLnnOOOOOOOOOOOOOO", names, &capsule, &topic, &partition,
                          &first_index, &rows, &header_count, &objects[0], &objects[1], &objects[2], &objects[3], &objects[4], &objects[5],
                          &objects[6], &objects[7], &objects[8], &objects[9], &objects[10], &objects[11],
                          &objects[12], &objects[13]))
        return NULL;
    producer_t *p = producer_of(capsule);
    if (p == NULL)
        return NULL;
    Py_buffer b[P_COUNT];
    int taken = 0;
    for (; taken < P_COUNT; taken++)
        if (take_buffer(objects[taken], &b[taken]) < 0)
            break;
    const char *wrong = NULL;
    if (taken < P_COUNT) {
        wrong = "";
    } else if (rows < 0 || header_count < 0 || rows >= INT32_MAX || header_count >= INT32_MAX) {
        wrong = "a count below 0 or above 2^31";
    } else if (b[P_KEY_OFFSETS].len < (rows + 1) * 4 || b[P_VALUE_OFFSETS].len < (rows + 1) * 4 ||
               b[P_TIMESTAMPS].len < rows * 8) {
        wrong = "key, value or timestamp buffers shorter than the rows";
    } else if ((b[P_KEY_VALID].buf && b[P_KEY_VALID].len * 8 < rows) ||
               (b[P_VALUE_VALID].buf && b[P_VALUE_VALID].len * 8 < rows) ||
               (b[P_HEADERS_VALID].buf && b[P_HEADERS_VALID].len * 8 < rows)) {
        wrong = "a validity bitmap shorter than the rows";
    } else if (b[P_HEADERS_OFFSETS].buf != NULL &&
               (b[P_HEADERS_OFFSETS].len < (rows + 1) * 4 || b[P_HEADER_KEY_OFFSETS].len < (header_count + 1) * 4 ||
                b[P_HEADER_VALUE_OFFSETS].len < (header_count + 1) * 4 ||
                (b[P_HEADER_VALUE_VALID].buf && b[P_HEADER_VALUE_VALID].len * 8 < header_count))) {
        wrong = "header buffers shorter than their counts";
    }
    Py_ssize_t produced = 0, bad_row = -1;
    int code = 0;
    if (wrong == NULL) {
        pthread_mutex_lock(&p->lock);
        int room = make_room(p, first_index, rows);
        pthread_mutex_unlock(&p->lock);
        if (room == -1)
            wrong = "delivery indexes outside the window of reports kept (forget what is settled first)";
        else if (room == -2)
            wrong = "no memory for the delivery reports";
    }
    const int32_t *header_offsets = wrong == NULL ? b[P_HEADERS_OFFSETS].buf : NULL;
    /* Every row is checked before the first is queued: a wrong buffer queues nothing. */
    for (Py_ssize_t i = 0; wrong == NULL && i < rows && bad_row < 0; i++) {
        int32_t s0, e0;
        if (!span(&b[P_KEY_OFFSETS], &b[P_KEY_DATA], i, &s0, &e0) ||
            !span(&b[P_VALUE_OFFSETS], &b[P_VALUE_DATA], i, &s0, &e0)) {
            bad_row = i;
        } else if (header_offsets != NULL && bit(&b[P_HEADERS_VALID], i)) {
            int32_t first = header_offsets[i], last = header_offsets[i + 1];
            if (first < 0 || first > last || last > header_count)
                bad_row = i;
            for (int32_t j = first; bad_row < 0 && j < last; j++)
                if (!span(&b[P_HEADER_KEY_OFFSETS], &b[P_HEADER_KEY_DATA], j, &s0, &e0) ||
                    !span(&b[P_HEADER_VALUE_OFFSETS], &b[P_HEADER_VALUE_DATA], j, &s0, &e0))
                    bad_row = i;
        }
    }
    if (wrong == NULL && bad_row < 0) {
        const int64_t *stamps = b[P_TIMESTAMPS].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < rows && code == 0; i++) {
            int32_t ks, ke, vs, ve;
            if (!span(&b[P_KEY_OFFSETS], &b[P_KEY_DATA], i, &ks, &ke) ||
                !span(&b[P_VALUE_OFFSETS], &b[P_VALUE_DATA], i, &vs, &ve)) {
                bad_row = i;
                break;
            }
            const char *key = bit(&b[P_KEY_VALID], i) ? (const char *)b[P_KEY_DATA].buf + ks : NULL;
            const char *value = bit(&b[P_VALUE_VALID], i) ? (const char *)b[P_VALUE_DATA].buf + vs : NULL;
            rd_kafka_headers_t *headers = NULL;
            if (header_offsets != NULL && bit(&b[P_HEADERS_VALID], i)) {
                int32_t first = header_offsets[i], last = header_offsets[i + 1];
                if (first < 0 || first > last || last > header_count) {
                    bad_row = i;
                    break;
                }
                headers = rk.headers_new((size_t)(last - first));
                for (int32_t j = first; j < last; j++) {
                    int32_t ns, ne, hs, he;
                    if (!span(&b[P_HEADER_KEY_OFFSETS], &b[P_HEADER_KEY_DATA], j, &ns, &ne) ||
                        !span(&b[P_HEADER_VALUE_OFFSETS], &b[P_HEADER_VALUE_DATA], j, &hs, &he)) {
                        bad_row = i;
                        break;
                    }
                    const char *hv = bit(&b[P_HEADER_VALUE_VALID], j) ? (const char *)b[P_HEADER_VALUE_DATA].buf + hs
                                                                      : NULL;
                    rk.header_add(headers, (const char *)b[P_HEADER_KEY_DATA].buf + ns, ne - ns, hv,
                                  hv ? he - hs : 0);
                }
                if (bad_row >= 0) {
                    rk.headers_destroy(headers);
                    break;
                }
            }
            for (;;) {
                int err;
                if (headers != NULL)
                    err = rk.producev(p->handle, RD_KAFKA_VTYPE_TOPIC, topic, RD_KAFKA_VTYPE_PARTITION,
                                      (int32_t)partition, RD_KAFKA_VTYPE_KEY, key, (size_t)(key ? ke - ks : 0),
                                      RD_KAFKA_VTYPE_VALUE, value, (size_t)(value ? ve - vs : 0),
                                      RD_KAFKA_VTYPE_MSGFLAGS, RD_KAFKA_MSG_F_COPY, RD_KAFKA_VTYPE_TIMESTAMP,
                                      stamps[i], RD_KAFKA_VTYPE_OPAQUE, (void *)(intptr_t)(first_index + i),
                                      RD_KAFKA_VTYPE_HEADERS, headers, RD_KAFKA_VTYPE_END);
                else
                    err = rk.producev(p->handle, RD_KAFKA_VTYPE_TOPIC, topic, RD_KAFKA_VTYPE_PARTITION,
                                      (int32_t)partition, RD_KAFKA_VTYPE_KEY, key, (size_t)(key ? ke - ks : 0),
                                      RD_KAFKA_VTYPE_VALUE, value, (size_t)(value ? ve - vs : 0),
                                      RD_KAFKA_VTYPE_MSGFLAGS, RD_KAFKA_MSG_F_COPY, RD_KAFKA_VTYPE_TIMESTAMP,
                                      stamps[i], RD_KAFKA_VTYPE_OPAQUE, (void *)(intptr_t)(first_index + i),
                                      RD_KAFKA_VTYPE_END);
                if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                    rk.poll(p->handle, 100); /* delivery reports make room */
                    continue;
                }
                if (err != 0) {
                    if (headers != NULL)
                        rk.headers_destroy(headers); /* librdkafka takes them only when it takes the record */
                    code = err;
                } else {
                    produced++;
                }
                break;
            }
            if ((i & 1023) == 1023)
                rk.poll(p->handle, 0);
        }
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < taken; i++)
        PyBuffer_Release(&b[i]);
    if (wrong != NULL) {
        if (*wrong)
            PyErr_Format(PyExc_ValueError, "produce: %s", wrong);
        return NULL;
    }
    /* After the check above, a row found wrong here is a bug: nothing of it was queued. */
    if (bad_row >= 0) {
        PyErr_Format(PyExc_ValueError, "produce: row %zd has offsets outside its buffers", bad_row);
        return NULL;
    }
    return named(ProducedType, Py_BuildValue("(ni)", produced, code));
}

/* wait(producer, flush, timeout_ms) -> with flush: messages not yet delivered (0: all reported), after waiting
 * for them up to timeout_ms; without: the events served (delivery reports, errors) within timeout_ms. */
PyObject *producer_wait(PyObject *self, PyObject *args) {
    PyObject *capsule;
    int flush, timeout_ms, result;
    if (!PyArg_ParseTuple(args, "Opi", &capsule, &flush, &timeout_ms))
        return NULL;
    producer_t *p = producer_of(capsule);
    if (p == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    if (flush) {
        rk.flush(p->handle, timeout_ms);
        result = rk.outq_len(p->handle);
    } else {
        result = rk.poll(p->handle, timeout_ms);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(result);
}

/*
 * deliveries(producer, forget_below) -> (reported, last_offset, base, offsets bytes, failures [(index, code)],
 *                                         failures_dropped, fatal (code, text) or None)
 *
 * The offsets of delivered records from index ``base`` on (int64, -1 where not delivered); what is below
 * ``forget_below`` is forgotten first (a committed transaction's records).
 */
PyObject *producer_deliveries(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long forget_below;
    if (!PyArg_ParseTuple(args, "OL", &capsule, &forget_below))
        return NULL;
    producer_t *p = producer_of(capsule);
    if (p == NULL)
        return NULL;
    pthread_mutex_lock(&p->lock);
    if (forget_below > p->base) {
        size_t drop = (size_t)(forget_below - p->base);
        if (drop >= p->offsets_size) {
            for (size_t i = 0; i < p->offsets_size; i++)
                p->offsets[i] = -1;
            p->offsets_size = 0;
        } else {
            memmove(p->offsets, p->offsets + drop, (p->offsets_size - drop) * sizeof *p->offsets);
            for (size_t i = p->offsets_size - drop; i < p->offsets_size; i++)
                p->offsets[i] = -1;
            p->offsets_size -= drop;
        }
        p->base = forget_below;
    }
    PyObject *offsets = PyBytes_FromStringAndSize((const char *)p->offsets, (Py_ssize_t)(p->offsets_size * 8));
    PyObject *failures = PyList_New((Py_ssize_t)p->failure_count);
    for (size_t i = 0; failures != NULL && i < p->failure_count; i++) {
        PyObject *item = Py_BuildValue("(Li)", (long long)p->failures[i].index, p->failures[i].code);
        if (item == NULL) {
            Py_CLEAR(failures);
            break;
        }
        PyList_SET_ITEM(failures, (Py_ssize_t)i, item);
    }
    long long reported = p->reported, last = p->last_offset, base = p->base, dropped = p->failures_dropped;
    pthread_mutex_unlock(&p->lock);
    /* Asked of librdkafka each time: its error callback is served only by a poll, after the call that met it. */
    char text[512] = "";
    int fatal_code = rk.fatal_error(p->handle, text, sizeof text);
    PyObject *fatal_error = Py_None;
    Py_INCREF(Py_None);
    if (fatal_code) {
        Py_DECREF(Py_None);
        fatal_error = Py_BuildValue("(is)", fatal_code, text);
    }
    if (offsets == NULL || failures == NULL || fatal_error == NULL) {
        Py_XDECREF(offsets);
        Py_XDECREF(failures);
        Py_XDECREF(fatal_error);
        return NULL;
    }
    return named(ReportsType, Py_BuildValue("(LLLNNLN)", reported, last, base, offsets, failures, dropped, fatal_error));
}

static PyObject *error_tuple(rd_kafka_error_t *error) {
    if (error == NULL)
        Py_RETURN_NONE;
    PyObject *t = named(RefusalType, Py_BuildValue("(isiii)", rk.error_code(error), rk.error_string(error),
                                                   rk.error_is_fatal(error), rk.error_is_retriable(error),
                                                   rk.error_txn_requires_abort(error)));
    rk.error_destroy(error);
    return t;
}

/* transaction(producer, what, timeout_ms) -> None or (code, text, fatal, retriable, requires_abort)
 * what: "init", "begin", "commit" or "abort". */
PyObject *producer_transaction(PyObject *self, PyObject *args) {
    PyObject *capsule;
    const char *what;
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "Osi", &capsule, &what, &timeout_ms))
        return NULL;
    producer_t *p = producer_of(capsule);
    if (p == NULL)
        return NULL;
    rd_kafka_error_t *(*call)(rd_kafka_t *, int) = NULL;
    if (strcmp(what, "init") == 0)
        call = rk.init_transactions;
    else if (strcmp(what, "commit") == 0)
        call = rk.commit_transaction;
    else if (strcmp(what, "abort") == 0)
        call = rk.abort_transaction;
    else if (strcmp(what, "begin") != 0) {
        PyErr_Format(PyExc_ValueError, "transaction: %s is not init, begin, commit or abort", what);
        return NULL;
    }
    rd_kafka_error_t *error;
    Py_BEGIN_ALLOW_THREADS
    error = call != NULL ? call(p->handle, timeout_ms) : rk.begin_transaction(p->handle);
    Py_END_ALLOW_THREADS
    return error_tuple(error);
}

/* send_offsets(producer, topic, partition, offset, metadata, group_id, timeout_ms) -> None or the error tuple:
 * ``offset`` with ``metadata`` committed for ``group_id`` with the open transaction. */
PyObject *producer_send_offsets(PyObject *self, PyObject *args) {
    PyObject *capsule;
    const char *topic, *metadata, *group;
    int partition, timeout_ms;
    long long offset;
    Py_ssize_t metadata_size;
    if (!PyArg_ParseTuple(args, "OsiLs#si", &capsule, &topic, &partition, &offset, &metadata, &metadata_size, &group,
                          &timeout_ms))
        return NULL;
    producer_t *p = producer_of(capsule);
    if (p == NULL)
        return NULL;
    char *copy = malloc((size_t)metadata_size + 1);
    if (copy == NULL)
        return PyErr_NoMemory();
    memcpy(copy, metadata, (size_t)metadata_size);
    copy[metadata_size] = 0;
    rd_kafka_topic_partition_list_t *list = rk.list_new(1);
    rd_kafka_topic_partition_t *position = rk.list_add(list, topic, partition);
    position->offset = offset;
    position->metadata = copy; /* freed with the list */
    /* With its NUL, as confluent-kafka writes it (and its readers expect): a marker reads the same either way. */
    position->metadata_size = (size_t)metadata_size + 1;
    rd_kafka_consumer_group_metadata_t *group_metadata = rk.group_metadata_new(group);
    rd_kafka_error_t *error;
    Py_BEGIN_ALLOW_THREADS
    error = rk.send_offsets_to_transaction(p->handle, list, group_metadata, timeout_ms);
    Py_END_ALLOW_THREADS
    rk.group_metadata_destroy(group_metadata);
    rk.list_destroy(list);
    return error_tuple(error);
}

/* close_producer(producer): destroy it now (what is still queued is dropped; flush first). */
PyObject *producer_close(PyObject *self, PyObject *args) {
    PyObject *capsule;
    if (!PyArg_ParseTuple(args, "O", &capsule))
        return NULL;
    producer_t *p = PyCapsule_GetPointer(capsule, CAPSULE);
    if (p == NULL)
        return NULL;
    if (p->handle != NULL) {
        rd_kafka_t *handle = p->handle;
        p->handle = NULL;
        Py_BEGIN_ALLOW_THREADS
        rk.destroy(handle);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}
