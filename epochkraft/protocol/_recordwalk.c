/* The records of an uncompressed RecordBatch v2 payload walked without building an object per record.
 *
 * walk(buffer, start, end, count) -> (min_timestamp_delta, max_timestamp_delta, keyless) | None
 *
 * It reads the `count` records in buffer[start:end] as Kafka's DefaultRecord.readFrom does (length, one
 * attributes byte, timestamp delta, offset delta, key, value, headers, the length matching the fields) and
 * answers a summary only when every record is well formed, record i has offset delta i and nothing is left
 * over. Anything else, or anything unusual (a varint of more bytes than its type can hold, an attributes byte of
 * 0x80 or more, a header key that is not ASCII), answers None: the caller then validates the batch the
 * slow way, which gives the error answer. So this walk only ever accepts; it never decides a refusal.
 * Every read is bounds-checked against `end`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Walks of more records than this let other threads run meanwhile (about half a millisecond of walking;
   batches of more than 4,096 records are validated on worker threads, never on the event loop). */
#define RELEASE_GIL_RECORDS 16384

/* An unsigned LEB128 of at most max_bytes bytes from [*p, end): 1 and the value, else 0. */
static int read_uvarint(const unsigned char **p, const unsigned char *end, int max_bytes, uint64_t *out)
{
    uint64_t value = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*p >= end)
            return 0;
        unsigned char b = *(*p)++;
        value |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = value;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* A varint of an int32 field (lengths, offset delta, counts): zigzag value below 2^32 in five bytes. */
static int read_varint32(const unsigned char **p, const unsigned char *end, uint64_t *zigzag)
{
    return read_uvarint(p, end, 5, zigzag) && *zigzag <= 0xFFFFFFFFu;
}

/* Skips a length-prefixed field within [*p, end); a negative length (odd zigzag) is a null. */
static int skip_bytes(const unsigned char **p, const unsigned char *end, int *is_null)
{
    uint64_t u;
    if (!read_varint32(p, end, &u))
        return 0;
    *is_null = (int)(u & 1);
    if (*is_null)
        return 1;
    if ((uint64_t)(end - *p) < (u >> 1))
        return 0;
    *p += u >> 1;
    return 1;
}

typedef struct {
    int64_t min_delta;
    int64_t max_delta;
    Py_ssize_t keyless;
} summary_t;

static int walk_records(const unsigned char *p, const unsigned char *end, Py_ssize_t count, summary_t *s)
{
    uint64_t u;
    int is_null;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (!read_varint32(&p, end, &u) || (u & 1) || (uint64_t)(end - p) < (u >> 1))
            return 0;
        const unsigned char *record_end = p + (u >> 1);
        if (p >= record_end || *p >= 0x80) /* attributes: one byte, every reader agrees below 0x80 */
            return 0;
        p++;
        if (!read_uvarint(&p, record_end, 9, &u)) /* timestamp delta, within +-2^62 */
            return 0;
        int64_t delta = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
        if (delta < s->min_delta)
            s->min_delta = delta;
        if (delta > s->max_delta)
            s->max_delta = delta;
        if (!read_varint32(&p, record_end, &u) || u != 2 * (uint64_t)index) /* offset delta == index */
            return 0;
        if (!skip_bytes(&p, record_end, &is_null)) /* key */
            return 0;
        s->keyless += is_null;
        if (!skip_bytes(&p, record_end, &is_null)) /* value */
            return 0;
        if (!read_varint32(&p, record_end, &u) || (u & 1) || (u >> 1) > (uint64_t)(record_end - p))
            return 0;
        for (uint64_t h = u >> 1; h > 0; h--) {
            if (!read_varint32(&p, record_end, &u) || (u & 1) || (uint64_t)(record_end - p) < (u >> 1))
                return 0;
            for (const unsigned char *k = p + (u >> 1); p < k; p++)
                if (*p >= 0x80) /* a key that is not ASCII: UTF-8 is checked the slow way */
                    return 0;
            if (!skip_bytes(&p, record_end, &is_null)) /* header value */
                return 0;
        }
        if (p != record_end)
            return 0;
    }
    return p == end;
}

static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, count;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &end, &count))
        return NULL;
    summary_t s = {INT64_MAX, INT64_MIN, 0};
    int ok = 0;
    if (0 <= start && start <= end && end <= view.len && count > 0) {
        const unsigned char *base = (const unsigned char *)view.buf;
        /* Without the GIL only over a read-only buffer: another thread could write into a writable one
           while it is walked (the bytes whose CRC was checked must be the ones walked). */
        if (count > RELEASE_GIL_RECORDS && view.readonly) {
            Py_BEGIN_ALLOW_THREADS
            ok = walk_records(base + start, base + end, count, &s);
            Py_END_ALLOW_THREADS
        } else {
            ok = walk_records(base + start, base + end, count, &s);
        }
    }
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(LLn)", (long long)s.min_delta, (long long)s.max_delta, s.keyless);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(buffer, start, end, count) -> (min_timestamp_delta, max_timestamp_delta, keyless) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordwalk", "Records of an uncompressed RecordBatch v2 walked in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__recordwalk(void) { return PyModule_Create(&module); }
