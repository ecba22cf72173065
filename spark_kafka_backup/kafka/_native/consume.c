/*
 * The native Kafka edge's consumer: it hands out Arrow column buffers, not one Python object per record.
 *
 * It reads one partition at a time (assign()), or several at once (add() and remove(), librdkafka's incremental
 * assignment, each partition with the end of its range): then each poll() hands out a run of consecutive records of
 * one partition, the one whose record or event came first, cut at that partition's end as assign()'s are, and says
 * which. Records and events of a partition no longer read (removed, or never added) are dropped here, unconverted.
 *
 * The consumer is librdkafka's, the very library confluent-kafka's wheel ships (see rdkafka.h and rdkafka.c), so
 * the native and reference paths run the same client with the same settings.
 *
 * poll() fills, for the records of one assigned partition, the buffers of Arrow arrays (little-endian, validity
 * bitmaps LSB first, 32-bit offsets):
 *
 *   offsets       int64[n]
 *   timestamps    int64[n]   microseconds (librdkafka's milliseconds x 1000; -1000 when the record has none)
 *   kinds         int32[n]   Kafka's timestamp type id: -1 none, 0 CreateTime, 1 LogAppendTime
 *   key, value    binary     validity[ceil(n/8)], offsets int32[n+1], data
 *   headers       list<struct<key: string, value: binary>>: list validity (null: no headers), list offsets
 *                 int32[n+1]; header keys (offsets int32[h+1], data); header values (validity, offsets, data)
 *
 * and stops at the first event (an error or partition EOF), at the first offset >= end, or when a buffer would
 * pass max_bytes. Messages fetched but not handed out (after an event, or past a full batch) stay in the
 * consumer and come first at the next poll(): nothing fetched is dropped silently. Messages of another
 * partition (left from an earlier assignment) are dropped, as the reference path drops them.
 */
#include <string.h>

#include "rdkafka.h"

/* ---- growable buffers ------------------------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t size, capacity;
} buffer_t;

static int reserve(buffer_t *b, size_t more) {
    if (b->size + more <= b->capacity)
        return 0;
    size_t capacity = b->capacity ? b->capacity : 1024;
    while (capacity < b->size + more)
        capacity *= 2;
    char *data = realloc(b->data, capacity);
    if (data == NULL)
        return -1;
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static int append(buffer_t *b, const void *bytes, size_t n) {
    if (n == 0)
        return 0;
    if (reserve(b, n))
        return -1;
    memcpy(b->data + b->size, bytes, n);
    b->size += n;
    return 0;
}

static int append_i32(buffer_t *b, int32_t v) { return append(b, &v, sizeof v); }

/* Bit ``i`` of a validity bitmap, growing it by a zeroed byte every 8 bits. */
static int set_valid(buffer_t *b, size_t i, int valid) {
    if ((i & 7) == 0) {
        if (reserve(b, 1))
            return -1;
        b->data[b->size++] = 0;
    } else if (b->size <= (i >> 3)) {
        return -1; /* an earlier step failed to grow it */
    }
    if (valid)
        b->data[i >> 3] |= (char)(1 << (i & 7));
    return 0;
}

static PyObject *to_bytes(buffer_t *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->size);
}

/* ---- the consumer ---------------------------------------------------------------------------------------- */

/* A partition read among several: where its range ends (exclusive), and whether it is still read. */
typedef struct {
    char *topic;
    int32_t partition;
    int64_t end;
    int active;
} range_t;

#define FETCH_MAX 5000

typedef struct {
    rd_kafka_t *handle;
    rd_kafka_queue_t *queue;
    char *topic;
    int32_t partition;
    int many;                            /* several partitions assigned (add()): runs of one partition */
    char run_topic[256];                 /* the topic of the run poll() hands out, many */
    range_t *ranges;                     /* many: the partitions added, with their ends */
    size_t range_count, range_capacity;
    rd_kafka_message_t *held[FETCH_MAX]; /* fetched, not yet handed out */
    char event_text[512];                /* the last event's own text */
    size_t held_at, held_count;
} consumer_t;

static const char *CAPSULE = "spark_kafka_backup.native_kafka.consumer";

static void drop_held(consumer_t *c) {
    for (size_t i = c->held_at; i < c->held_count; i++)
        rk.message_destroy(c->held[i]);
    c->held_at = c->held_count = 0;
}

static void consumer_free(consumer_t *c) {
    drop_held(c);
    if (c->queue)
        rk.queue_destroy(c->queue);
    if (c->handle) {
        rk.consumer_close(c->handle);
        rk.destroy(c->handle);
    }
    free(c->topic);
    for (size_t i = 0; i < c->range_count; i++)
        free(c->ranges[i].topic);
    free(c->ranges);
    free(c);
}

static void capsule_destructor(PyObject *capsule) {
    consumer_t *c = PyCapsule_GetPointer(capsule, CAPSULE);
    if (c != NULL)
        consumer_free(c);
}

static consumer_t *consumer_of(PyObject *capsule) {
    consumer_t *c = PyCapsule_GetPointer(capsule, CAPSULE);
    if (c != NULL && c->handle == NULL) {
        PyErr_SetString(PyExc_ValueError, "the consumer is closed");
        return NULL;
    }
    return c;
}

/* consumer(settings: dict[str, str]) -> capsule */
PyObject *consumer_new(PyObject *self, PyObject *args) {
    rd_kafka_conf_t *conf = conf_argument(args);
    if (conf == NULL)
        return NULL;
    char error[512];
    rd_kafka_t *handle = rk.new_(RD_KAFKA_CONSUMER, conf, error, sizeof error); /* takes conf when it succeeds */
    if (handle == NULL) {
        rk.conf_destroy(conf);
        PyErr_Format(PyExc_ValueError, "cannot create a consumer: %s", error);
        return NULL;
    }
    consumer_t *c = calloc(1, sizeof *c);
    if (c == NULL) {
        rk.destroy(handle);
        return PyErr_NoMemory();
    }
    c->handle = handle;
    /* The client's own events (token refreshes, errors) come through the consumer's queue, served by poll(). */
    rk.poll_set_consumer(handle);
    c->queue = rk.queue_get_consumer(handle);
    c->partition = -1;
    if (c->queue == NULL) {
        consumer_free(c);
        PyErr_SetString(PyExc_ValueError, "cannot create a consumer: it has no group (set group.id)");
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(c, CAPSULE, capsule_destructor);
    if (capsule == NULL)
        consumer_free(c);
    return capsule;
}

/* assign(consumer, topic, partition, offset): read that partition alone from ``offset``. */
PyObject *consumer_assign(PyObject *self, PyObject *args) {
    PyObject *capsule;
    const char *topic;
    int partition;
    long long offset;
    if (!PyArg_ParseTuple(args, "OsiL", &capsule, &topic, &partition, &offset))
        return NULL;
    consumer_t *c = consumer_of(capsule);
    if (c == NULL)
        return NULL;
    char *copy = strdup(topic);
    if (copy == NULL)
        return PyErr_NoMemory();
    rd_kafka_topic_partition_list_t *list = rk.list_new(1);
    rk.list_add(list, topic, partition)->offset = offset;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = rk.assign(c->handle, list);
    Py_END_ALLOW_THREADS
    rk.list_destroy(list);
    if (err) {
        free(copy);
        PyErr_Format(PyExc_RuntimeError, "cannot assign %s [%d]: %s", topic, partition, rk.err2str(err));
        return NULL;
    }
    drop_held(c); /* fetched for the earlier assignment */
    free(c->topic);
    c->topic = copy;
    c->partition = partition;
    c->many = 0;
    Py_RETURN_NONE;
}

/* The range of a partition added (NULL: not added, or removed when ``active_only``). */
static range_t *range_of(consumer_t *c, const char *topic, int32_t partition, int active_only) {
    for (size_t i = 0; i < c->range_count; i++) {
        range_t *r = &c->ranges[i];
        if (r->partition == partition && strcmp(r->topic, topic) == 0)
            return active_only && !r->active ? NULL : r;
    }
    return NULL;
}

/* From a single assignment to several: the earlier partition is no longer read. */
static int start_many(consumer_t *c) {
    if (c->many)
        return 0;
    if (c->topic != NULL) {
        rd_kafka_topic_partition_list_t *none = rk.list_new(0);
        int err;
        Py_BEGIN_ALLOW_THREADS
        err = rk.assign(c->handle, none);
        Py_END_ALLOW_THREADS
        rk.list_destroy(none);
        if (err) {
            PyErr_Format(PyExc_RuntimeError, "cannot unassign %s [%d]: %s", c->topic, c->partition, rk.err2str(err));
            return -1;
        }
    }
    drop_held(c);
    free(c->topic);
    c->topic = NULL;
    c->partition = -1;
    c->many = 1;
    return 0;
}

/* Apply an incremental change; 0, or -1 with the Python error set. */
static int change(consumer_t *c, rd_kafka_topic_partition_list_t *list, int adding) {
    rd_kafka_error_t *error;
    Py_BEGIN_ALLOW_THREADS
    error = adding ? rk.incremental_assign(c->handle, list) : rk.incremental_unassign(c->handle, list);
    Py_END_ALLOW_THREADS
    if (error == NULL)
        return 0;
    PyErr_Format(PyExc_RuntimeError, "cannot %s: %s", adding ? "assign partitions" : "unassign a partition",
                 rk.error_string(error));
    rk.error_destroy(error);
    return -1;
}

/* add(consumer, [(topic, partition, offset, end), ...]): read these partitions too, from ``offset``, up to ``end``
   (exclusive); a partition added again (after remove()) takes its new offset and end. */
PyObject *consumer_add(PyObject *self, PyObject *args) {
    PyObject *capsule, *items;
    if (!PyArg_ParseTuple(args, "OO", &capsule, &items))
        return NULL;
    consumer_t *c = consumer_of(capsule);
    if (c == NULL)
        return NULL;
    PyObject *sequence = PySequence_Fast(items, "add() takes a list of (topic, partition, offset, end)");
    if (sequence == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
    if (start_many(c)) {
        Py_DECREF(sequence);
        return NULL;
    }
    rd_kafka_topic_partition_list_t *list = rk.list_new((int)n);
    int failed = 0;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        const char *topic;
        int partition;
        long long offset, end;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(sequence, i), "siLL", &topic, &partition, &offset, &end)) {
            failed = 1;
            break;
        }
        if (strlen(topic) >= sizeof c->run_topic) {
            PyErr_Format(PyExc_ValueError, "a topic name of %zu bytes: Kafka allows 249", strlen(topic));
            failed = 1;
            break;
        }
        range_t *r = range_of(c, topic, partition, 0);
        if (r == NULL) {
            if (c->range_count == c->range_capacity) {
                size_t capacity = c->range_capacity ? 2 * c->range_capacity : 16;
                range_t *grown = realloc(c->ranges, capacity * sizeof *grown);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    failed = 1;
                    break;
                }
                c->ranges = grown;
                c->range_capacity = capacity;
            }
            char *copy = strdup(topic);
            if (copy == NULL) {
                PyErr_NoMemory();
                failed = 1;
                break;
            }
            r = &c->ranges[c->range_count++];
            r->topic = copy;
            r->partition = partition;
        }
        r->end = end;
        r->active = 1;
        rk.list_add(list, topic, partition)->offset = offset;
    }
    Py_DECREF(sequence);
    if (!failed)
        failed = change(c, list, 1) != 0;
    rk.list_destroy(list);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* remove(consumer, topic, partition): stop reading it; what was fetched of it is dropped. */
PyObject *consumer_remove(PyObject *self, PyObject *args) {
    PyObject *capsule;
    const char *topic;
    int partition;
    if (!PyArg_ParseTuple(args, "Osi", &capsule, &topic, &partition))
        return NULL;
    consumer_t *c = consumer_of(capsule);
    if (c == NULL)
        return NULL;
    range_t *r = c->many ? range_of(c, topic, partition, 1) : NULL;
    if (r == NULL) {
        PyErr_Format(PyExc_ValueError, "remove(): %s [%d] was not added", topic, partition);
        return NULL;
    }
    r->active = 0;
    rd_kafka_topic_partition_list_t *list = rk.list_new(1);
    rk.list_add(list, topic, partition);
    int failed = change(c, list, 0);
    rk.list_destroy(list);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* The next fetched message, from what is held or from a new fetch; NULL when none came within timeout_ms. */
static rd_kafka_message_t *next_message(consumer_t *c, int timeout_ms) {
    if (c->held_at == c->held_count) {
        ssize_t got = rk.consume_batch_queue(c->queue, timeout_ms, c->held, FETCH_MAX);
        c->held_at = 0;
        c->held_count = got > 0 ? (size_t)got : 0;
        if (c->held_count == 0)
            return NULL;
    }
    return c->held[c->held_at];
}

enum { B_OFFSETS, B_TIMESTAMPS, B_KINDS, B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA, B_VALUE_VALID, B_VALUE_OFFSETS,
       B_VALUE_DATA, B_HEADERS_VALID, B_HEADERS_OFFSETS, B_HEADER_KEY_OFFSETS, B_HEADER_KEY_DATA,
       B_HEADER_VALUE_VALID, B_HEADER_VALUE_OFFSETS, B_HEADER_VALUE_DATA, B_COUNT };

/*
 * poll(consumer, max_rows, timeout_ms, end, max_bytes)
 *   -> (rows, headers_count, (16 buffers as bytes), event_code, event_offset, event_text, topic, partition)
 *
 * event_code 0: no event (the batch ended at max_rows, max_bytes, end, or a fetch that brought nothing within
 * timeout_ms). ``reached_end`` (offset >= end seen, or end - 1 handed out) is returned as event_code 0 with
 * event_offset set to the offset that reached it, else -1. ``topic`` and ``partition`` are those of the records and
 * the event (with several partitions assigned: of the run handed out; "" and -1 for an event of no partition).
 */
PyObject *consumer_poll(PyObject *self, PyObject *args) {
    PyObject *capsule;
    Py_ssize_t max_rows, max_bytes;
    int timeout_ms;
    long long end;
    if (!PyArg_ParseTuple(args, "OniLn", &capsule, &max_rows, &timeout_ms, &end, &max_bytes))
        return NULL;
    consumer_t *c = consumer_of(capsule);
    if (c == NULL)
        return NULL;
    if (c->topic == NULL && !c->many) {
        PyErr_SetString(PyExc_ValueError, "poll() before assign() or add()");
        return NULL;
    }
    const char *run_topic = c->many ? NULL : c->topic; /* many: set by the run's first record or event */
    int32_t run_partition = c->many ? -1 : c->partition;
    c->run_topic[0] = 0;
    if (c->many)
        end = INT64_MAX; /* set by the run's partition */
    if (max_bytes > INT32_MAX)
        max_bytes = INT32_MAX;
    buffer_t b[B_COUNT];
    memset(b, 0, sizeof b);
    size_t rows = 0, headers = 0;
    int event = 0, failed = 0;
    long long event_offset = -1;
    const char *event_text = "";
    failed |= append_i32(&b[B_KEY_OFFSETS], 0) | append_i32(&b[B_VALUE_OFFSETS], 0);
    failed |= append_i32(&b[B_HEADERS_OFFSETS], 0) | append_i32(&b[B_HEADER_KEY_OFFSETS], 0);
    failed |= append_i32(&b[B_HEADER_VALUE_OFFSETS], 0);

    Py_BEGIN_ALLOW_THREADS
    while (!failed && rows < (size_t)max_rows) {
        /* Wait for a fetch only while nothing is in hand: a batch is handed out as soon as no more is fetched. */
        rd_kafka_message_t *m = next_message(c, rows == 0 ? timeout_ms : 0);
        if (m == NULL)
            break;
        if (c->many) {
            const char *name = m->rkt != NULL ? rk.topic_name(m->rkt) : "";
            if (run_topic == NULL) {
                range_t *r = m->rkt != NULL ? range_of(c, name, m->partition, 1) : NULL;
                if (m->rkt != NULL && r == NULL) {
                    c->held_at++;
                    rk.message_destroy(m); /* of a partition no longer read (or a fetch ahead of its removal) */
                    continue;
                }
                size_t n = strlen(name);
                n = n < sizeof c->run_topic - 1 ? n : sizeof c->run_topic - 1;
                memcpy(c->run_topic, name, n);
                c->run_topic[n] = 0;
                run_topic = c->run_topic;
                run_partition = m->rkt != NULL ? m->partition : -1;
                if (r != NULL)
                    end = (long long)r->end;
            } else if (m->partition != run_partition || strcmp(name, run_topic) != 0) {
                break; /* another partition's: it starts the next run */
            }
        }
        if (m->err) {
            event = m->err;
            event_offset = m->offset;
            /* An event's payload, when it has one, is its own text (librdkafka's rd_kafka_message_errstr). */
            if (m->payload != NULL && m->len > 0) {
                size_t n = m->len < sizeof c->event_text - 1 ? m->len : sizeof c->event_text - 1;
                memcpy(c->event_text, m->payload, n);
                c->event_text[n] = 0;
                event_text = c->event_text;
            } else {
                event_text = rk.err2str(m->err);
            }
            c->held_at++;
            rk.message_destroy(m);
            break;
        }
        if (!c->many && (m->partition != c->partition || strcmp(rk.topic_name(m->rkt), c->topic) != 0)) {
            c->held_at++;
            rk.message_destroy(m); /* left from an earlier assignment */
            continue;
        }
        if (m->offset >= end) {
            event_offset = m->offset; /* past the range: the rest is not this range's */
            c->held_at++;
            rk.message_destroy(m);
            break;
        }
        size_t key_len = m->key ? m->key_len : 0, value_len = m->payload ? m->len : 0;
        size_t header_key_len = 0, header_value_len = 0;
        rd_kafka_headers_t *hs = NULL;
        int has_headers = rk.message_headers(m, &hs) == 0 && hs != NULL;
        size_t header_count = has_headers ? rk.header_cnt(hs) : 0;
        for (size_t j = 0; j < header_count; j++) {
            const char *name = NULL;
            const void *bytes = NULL;
            size_t size = 0;
            if (rk.header_get_all(hs, j, &name, &bytes, &size) == 0) {
                header_key_len += strlen(name);
                header_value_len += bytes ? size : 0;
            }
        }
        /* Every data buffer stays below max_bytes (<= 2 GiB - 1: 32-bit Arrow offsets); a record starts the next
         * batch when it would pass it. */
        if (rows > 0 && (b[B_KEY_DATA].size + key_len > (size_t)max_bytes ||
                         b[B_VALUE_DATA].size + value_len > (size_t)max_bytes ||
                         b[B_HEADER_KEY_DATA].size + header_key_len > (size_t)max_bytes ||
                         b[B_HEADER_VALUE_DATA].size + header_value_len > (size_t)max_bytes)) {
            break;
        }
        if (key_len > INT32_MAX || value_len > INT32_MAX || header_key_len > INT32_MAX ||
            header_value_len > INT32_MAX) {
            event = -1;
            event_offset = m->offset;
            event_text = "a record whose key, value or headers pass 2 GiB";
            break;
        }
        int kind = 0;
        int64_t millis = rk.message_timestamp(m, &kind);
        int64_t micros = millis * 1000;
        int32_t kind_id = kind - 1; /* librdkafka 0 none, 1 create, 2 log append -> Kafka's -1, 0, 1 */
        failed |= append(&b[B_OFFSETS], &m->offset, 8) | append(&b[B_TIMESTAMPS], &micros, 8);
        failed |= append(&b[B_KINDS], &kind_id, 4);
        failed |= set_valid(&b[B_KEY_VALID], rows, m->key != NULL) | append(&b[B_KEY_DATA], m->key, key_len);
        failed |= append_i32(&b[B_KEY_OFFSETS], (int32_t)b[B_KEY_DATA].size);
        failed |= set_valid(&b[B_VALUE_VALID], rows, m->payload != NULL);
        failed |= append(&b[B_VALUE_DATA], m->payload, value_len);
        failed |= append_i32(&b[B_VALUE_OFFSETS], (int32_t)b[B_VALUE_DATA].size);
        failed |= set_valid(&b[B_HEADERS_VALID], rows, has_headers);
        if (has_headers) {
            for (size_t j = 0; j < header_count && !failed; j++) {
                const char *name = NULL;
                const void *bytes = NULL;
                size_t size = 0;
                if (rk.header_get_all(hs, j, &name, &bytes, &size) != 0)
                    break;
                failed |= append(&b[B_HEADER_KEY_DATA], name, strlen(name));
                failed |= append_i32(&b[B_HEADER_KEY_OFFSETS], (int32_t)b[B_HEADER_KEY_DATA].size);
                failed |= set_valid(&b[B_HEADER_VALUE_VALID], headers, bytes != NULL);
                failed |= append(&b[B_HEADER_VALUE_DATA], bytes, bytes ? size : 0);
                failed |= append_i32(&b[B_HEADER_VALUE_OFFSETS], (int32_t)b[B_HEADER_VALUE_DATA].size);
                headers++;
            }
        }
        failed |= append_i32(&b[B_HEADERS_OFFSETS], (int32_t)headers);
        rows++;
        int64_t offset = m->offset;
        c->held_at++;
        rk.message_destroy(m);
        if (offset >= end - 1) {
            event_offset = offset; /* the range's last offset */
            break;
        }
    }
    Py_END_ALLOW_THREADS

    PyObject *result = NULL;
    if (failed) {
        PyErr_NoMemory();
    } else {
        PyObject *buffers = PyStructSequence_New(ColumnBuffersType);
        for (int i = 0; buffers != NULL && i < B_COUNT; i++) {
            PyObject *bytes = to_bytes(&b[i]);
            if (bytes == NULL) {
                Py_CLEAR(buffers);
                break;
            }
            PyStructSequence_SetItem(buffers, i, bytes);
        }
        if (buffers != NULL)
            result = named(PolledType, Py_BuildValue("(nnNiLssi)", (Py_ssize_t)rows, (Py_ssize_t)headers, buffers, event, event_offset,
                                   event_text, run_topic != NULL ? run_topic : "", (int)run_partition));
    }
    for (int i = 0; i < B_COUNT; i++)
        free(b[i].data);
    return result;
}

/* watermarks(consumer, topic, partition, timeout_ms) -> (low, high) */
PyObject *consumer_watermarks(PyObject *self, PyObject *args) {
    PyObject *capsule;
    const char *topic;
    int partition, timeout_ms;
    if (!PyArg_ParseTuple(args, "Osii", &capsule, &topic, &partition, &timeout_ms))
        return NULL;
    consumer_t *c = consumer_of(capsule);
    if (c == NULL)
        return NULL;
    int64_t low = -1, high = -1;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = rk.query_watermark_offsets(c->handle, topic, partition, &low, &high, timeout_ms);
    Py_END_ALLOW_THREADS
    if (err) {
        PyErr_Format(PyExc_RuntimeError, "%s", rk.err2str(err));
        return NULL;
    }
    return named(WatermarksType, Py_BuildValue("(LL)", (long long)low, (long long)high));
}

/* close(consumer): leave the cluster now (the capsule's destructor would, later). */
PyObject *consumer_close(PyObject *self, PyObject *args) {
    PyObject *capsule;
    if (!PyArg_ParseTuple(args, "O", &capsule))
        return NULL;
    consumer_t *c = PyCapsule_GetPointer(capsule, CAPSULE);
    if (c == NULL)
        return NULL;
    if (c->handle != NULL) {
        Py_BEGIN_ALLOW_THREADS
        drop_held(c);
        rk.queue_destroy(c->queue);
        rk.consumer_close(c->handle);
        rk.destroy(c->handle);
        Py_END_ALLOW_THREADS
        c->handle = NULL;
        c->queue = NULL;
    }
    Py_RETURN_NONE;
}

