/* spark_kafka_backup.format._native_records: where each field of v1 records lies, found in C.

The byte layout is spark_kafka_backup/format/record.py's; record_columns.decode_columns is the reference and the
face. Both functions walk records the segment index names (record i is data[starts[i]:ends[i]]) and answer only
for records that are all valid: any violation (an offset that differs from the index, a timestamp type outside
-2..1, a length that does not fit, a record that does not fill its indexed length, a header key that is not UTF-8)
makes them return -1, and the caller decodes with the reference, which names the violation. The GIL is released
while they walk.

scan(data, starts, ends, offsets, fixed) -> header count of all records, or -1
    fixed: 8 * n int64, written as 8 columns of n: timestamp type, timestamp (0 without one), key start, key length,
    value start, value length, header count, first header's slot.
headers(data, starts, ends, fixed, out) -> 0, or -1
    out: 4 * total int64, written as 4 columns of total: header key start, key length, value start, value length.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define FIXED_COLUMNS 8
#define HEADER_COLUMNS 4

static int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

/* Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). */
static int valid_utf8(const uint8_t *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + need > n - 1)
            return 0;
        for (int k = 1; k <= need; k++) {
            uint8_t d = s[i + k];
            if ((d & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* A length-prefixed field at *at (before end): its start and length; -1 when it does not fit. */
static int field(const uint8_t *data, int64_t *at, int64_t end, int nullable, int64_t *start, int64_t *length) {
    if (*at + 4 > end)
        return -1;
    int32_t n = be32(data + *at);
    *start = *at + 4;
    if (n < (nullable ? -1 : 0) || (int64_t)n > end - *start)
        return -1;
    *length = n;
    *at = *start + (n > 0 ? n : 0);
    return 0;
}

typedef struct {
    Py_buffer data, starts, ends, offsets, out;
    int held;
} Views;

static void release(Views *v) {
    Py_buffer *all[] = {&v->data, &v->starts, &v->ends, &v->offsets, &v->out};
    for (int i = 0; i < v->held; i++)
        PyBuffer_Release(all[i]);
}

static int take(Views *v, PyObject *objects[5], int writable_last) {
    Py_buffer *all[] = {&v->data, &v->starts, &v->ends, &v->offsets, &v->out};
    v->held = 0;
    for (int i = 0; i < 5; i++) {
        if (objects[i] == NULL) {
            memset(all[i], 0, sizeof *all[i]);
            continue;
        }
        int flags = (i == 4 && writable_last) ? PyBUF_WRITABLE : PyBUF_SIMPLE;
        if (PyObject_GetBuffer(objects[i], all[i], flags) < 0)
            return -1;
        v->held = i + 1;
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *objects[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4]))
        return NULL;
    Views v;
    if (take(&v, objects, 1) < 0) {
        release(&v);
        return NULL;
    }
    Py_ssize_t n = v.starts.len / 8;
    if (v.ends.len / 8 != n || v.offsets.len / 8 != n || v.out.len < (Py_ssize_t)(FIXED_COLUMNS * 8 * n)) {
        release(&v);
        PyErr_SetString(PyExc_ValueError, "scan: starts, ends and offsets must be n int64 each, fixed 8 * n");
        return NULL;
    }
    const uint8_t *data = v.data.buf;
    int64_t size = v.data.len;
    const int64_t *starts = v.starts.buf, *ends = v.ends.buf, *offsets = v.offsets.buf;
    int64_t *out = v.out.buf;
    int64_t *types = out, *stamps = out + n, *key_starts = out + 2 * n, *key_lengths = out + 3 * n;
    int64_t *value_starts = out + 4 * n, *value_lengths = out + 5 * n, *counts = out + 6 * n, *firsts = out + 7 * n;
    int64_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && total >= 0; i++) {
        int64_t at = starts[i], end = ends[i];
        if (at < 0 || at > end || end > size || end - at < 12 || be64(data + at) != offsets[i]) {
            total = -1;
            break;
        }
        int32_t type = be32(data + at + 8);
        if (type < -2 || type > 1) {
            total = -1;
            break;
        }
        types[i] = type;
        at += 12;
        stamps[i] = 0;
        if (type == 0 || type == 1) {
            if (at + 8 > end) {
                total = -1;
                break;
            }
            stamps[i] = be64(data + at);
            at += 8;
        }
        if (field(data, &at, end, 1, &key_starts[i], &key_lengths[i]) < 0 ||
            field(data, &at, end, 1, &value_starts[i], &value_lengths[i]) < 0 || at + 4 > end) {
            total = -1;
            break;
        }
        int32_t count = be32(data + at);
        at += 4;
        if (count < 0 || (int64_t)count * 8 > end - at) {
            total = -1;
            break;
        }
        for (int32_t h = 0; h < count; h++) {
            int64_t ks, kl, vs, vl;
            if (field(data, &at, end, 0, &ks, &kl) < 0 || !valid_utf8(data + ks, kl) ||
                field(data, &at, end, 1, &vs, &vl) < 0) {
                total = -1;
                break;
            }
        }
        if (total < 0 || at != end) {
            total = -1;
            break;
        }
        counts[i] = count;
        firsts[i] = total;
        total += count;
    }
    Py_END_ALLOW_THREADS
    release(&v);
    return PyLong_FromLongLong(total);
}

static PyObject *headers(PyObject *self, PyObject *args) {
    PyObject *objects[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4]))
        return NULL;
    Views v; /* offsets' place holds the fixed columns here */
    if (take(&v, objects, 1) < 0) {
        release(&v);
        return NULL;
    }
    Py_ssize_t n = v.starts.len / 8;
    const int64_t *fixed = v.offsets.buf;
    if (v.ends.len / 8 != n || v.offsets.len < (Py_ssize_t)(FIXED_COLUMNS * 8 * n)) {
        release(&v);
        PyErr_SetString(PyExc_ValueError, "headers: starts and ends must be n int64 each, fixed 8 * n");
        return NULL;
    }
    const int64_t *value_starts = fixed + 4 * n, *value_lengths = fixed + 5 * n, *counts = fixed + 6 * n;
    const int64_t *firsts = fixed + 7 * n;
    int64_t total = n ? firsts[n - 1] + counts[n - 1] : 0;
    if (total < 0 || v.out.len / (8 * HEADER_COLUMNS) < total) {
        release(&v);
        PyErr_SetString(PyExc_ValueError, "headers: out must be 4 * total int64");
        return NULL;
    }
    const uint8_t *data = v.data.buf;
    int64_t size = v.data.len;
    const int64_t *starts = v.starts.buf, *ends = v.ends.buf;
    int64_t *out = v.out.buf;
    int64_t *ks = out, *kl = out + total, *vs = out + 2 * total, *vl = out + 3 * total;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        /* fixed is scan's own; checked anyway, as cheaply: every read inside the record, every slot inside out */
        int64_t end = ends[i], length = value_lengths[i] > 0 ? value_lengths[i] : 0;
        if (starts[i] < 0 || end > size || value_starts[i] < starts[i] || value_starts[i] > end ||
            length > end - value_starts[i] || counts[i] < 0 || firsts[i] < 0 || firsts[i] > total - counts[i]) {
            failed = 1;
            break;
        }
        int64_t at = value_starts[i] + length + 4;
        for (int64_t slot = firsts[i]; slot < firsts[i] + counts[i]; slot++) {
            if (field(data, &at, end, 0, &ks[slot], &kl[slot]) < 0 || field(data, &at, end, 1, &vs[slot], &vl[slot]) < 0) {
                failed = 1;
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    release(&v);
    return PyLong_FromLong(failed ? -1 : 0);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(data, starts, ends, offsets, fixed) -> header count, or -1 (see the source)"},
    {"headers", headers, METH_VARARGS, "headers(data, starts, ends, fixed, out) -> 0, or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_records", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native_records(void) { return PyModule_Create(&module); }
