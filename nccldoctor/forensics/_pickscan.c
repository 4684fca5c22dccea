/* The C speedup of nccldoctor/forensics/pickscan.py: what a pickle would build, from its opcodes.
 *
 * scan(data, max_objects, max_bytes, max_depth) -> None or (why, at, number), exactly as
 * pickscan.scan_python computes it (the tests run both on genuine dumps, generated pickles and
 * hostile ones): the opcodes run over a model of the unpickler's stack and memo where a value is
 * only its weight (objects a walk visits, bytes of strings and ints, depth in containers, each
 * shared reference again); `why` is a pickscan.Stop, `at` the opcode's offset.
 * Values live in one array; the stack and the memo hold their indices. Sums stay below 2^64:
 * bounds are at most 2^32, a pickle under 2 GiB, and each sum is checked once an opcode has added
 * to it.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")  /* a tenth faster than the build's -O2 here */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { KEY, SCALAR, TUPLE, FROZENSET, LIST, DICT, SET };
enum { TRUNCATED = 1, OPCODE, STACK, MEMO, NOT_DATA, BADKEY, CHANGED, OBJECTS, BYTES, DEPTH,
       NUMBER };  /* pickscan.Stop */
#define SHORT_DIGITS 18
#define LONG_BYTES 8
#define LONG_DIGITS 20

/* A container the pickle builds, as the scan weighs it. No field is a size_t (unsigned long) or
 * a char, so the compiler knows that a store to a value leaves the scan's lengths alone. */
typedef struct {
    unsigned long long objects, bytes;
    uint16_t depth, kind;
    uint16_t frozen;  /* referenced again (a memo GET, DUP): a list, dict or set may not change */
} Value;

/* The stack and the memo hold refs, as the unpickler's hold objects: a container's index in
 * `values` (a list the memo gives back is the one the stack built, and grows with it), or a
 * scalar itself, IMMEDIATE: one object of its bytes (under 2^30), NOT_KEY when it is no key. A
 * dump's 90k values are 75k scalars: they never touch memory of their own. */
#define IMMEDIATE 0x80000000u
#define NOT_KEY 0x40000000u
#define SCALAR_BYTES 0x3fffffffu

typedef struct {
    uint32_t *items;
    size_t len, cap;
} Refs;

typedef struct {
    const unsigned char *data;
    size_t size, at;
    uint64_t max_objects, max_bytes, max_depth, built, number;  /* not a value's type */
    int why;
    Value *values;  /* every container built, in order */
    size_t nvalues, capvalues;
    Refs stack, memo;
    size_t *marks;
    size_t nmarks, capmarks;
} Scan;

static int stop(Scan *s, int why, uint64_t number) {
    s->why = why;
    s->number = number;
    return -1;
}

static int grow(Scan *s, void **items, size_t *cap, size_t need, size_t width) {
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap * 2 : 1024;
    while (cap2 < need)
        cap2 *= 2;
    void *bigger = realloc(*items, cap2 * width);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return stop(s, -1, 0);
    }
    *items = bigger;
    *cap = cap2;
    return 0;
}

/* An opcode builds at most one value, pushes at most one and stores at most one memo entry, so
 * each array, sized to the pickle's bytes before the scan, always has room (untouched, the room
 * costs no memory). */
static inline void push(Scan *s, uint32_t value) { s->stack.items[s->stack.len++] = value; }

static int over(Scan *s, uint64_t objects, uint64_t bytes) {
    if (objects > s->max_objects)
        return stop(s, OBJECTS, s->max_objects);
    if (bytes > s->max_bytes)
        return stop(s, BYTES, s->max_bytes);
    return stop(s, DEPTH, s->max_depth);
}

/* One branch for the three bounds (the scan's most frequent test); which one, only when over. */
static inline int check(Scan *s, uint64_t objects, uint64_t bytes, unsigned depth) {
    if ((objects > s->max_objects) | (bytes > s->max_bytes) | (depth > s->max_depth))
        return over(s, objects, bytes);
    return 0;
}

/* A scalar just built, pushed: one object of nbytes; the values built so far count as objects. */
static inline int scalar(Scan *s, uint64_t nbytes, int kind) {
    if (check(s, ++s->built, nbytes, 0) < 0)
        return -1;
    push(s, IMMEDIATE | (kind == KEY ? 0 : NOT_KEY) | (uint32_t)nbytes);
    return 0;
}

/* An empty container just built, pushed. */
static inline int build(Scan *s, int kind) {
    if (check(s, ++s->built, 0, 1) < 0)
        return -1;
    Value *v = &s->values[s->nvalues];
    v->objects = 1;
    v->bytes = 0;
    v->depth = 1;
    v->kind = (uint16_t)kind;
    v->frozen = 0;
    push(s, (uint32_t)s->nvalues++);
    return 0;
}

/* items go into target, checked once they are in: each weighs at most the bounds (2^32), there
 * are fewer than 2^31 of them, so no sum wraps. */
static inline int add(Scan *s, Value *t, const uint32_t *items, size_t count) {
    unsigned long long objects = t->objects, bytes = t->bytes;
    unsigned depth = t->depth;
    for (size_t i = 0; i < count; i++) {
        uint32_t r = items[i];
        if (r & IMMEDIATE) {  /* a scalar: the target is deeper already */
            objects += 1;
            bytes += r & SCALAR_BYTES;
            continue;
        }
        const Value *w = &s->values[r];
        objects += w->objects;
        bytes += w->bytes;
        if (w->depth + 1u > depth)
            depth = w->depth + 1u;
    }
    t->objects = objects;
    t->bytes = bytes;
    t->depth = (uint16_t)depth;
    return check(s, objects, bytes, depth);
}

static inline size_t fence(const Scan *s) { return s->nmarks ? s->marks[s->nmarks - 1] : 0; }

static inline int need(Scan *s, size_t count, int op) {
    if (s->stack.len - fence(s) < count)
        return stop(s, STACK, (uint64_t)op);
    return 0;
}

/* Pops the top mark: the items above it start at *start (they stay in place until dropped). */
static int pop_mark(Scan *s, int op, size_t *start) {
    if (s->nmarks == 0)
        return stop(s, STACK, (uint64_t)op);
    *start = s->marks[--s->nmarks];
    return 0;
}

/* The container an opcode changes: of kind, never referenced yet. */
static Value *target(Scan *s, size_t position, int kind, int op) {
    if (position < fence(s) || position >= s->stack.len) {
        stop(s, STACK, (uint64_t)op);
        return NULL;
    }
    uint32_t r = s->stack.items[position];
    Value *v = &s->values[r & ~IMMEDIATE];
    if ((r & IMMEDIATE) || v->kind != kind) {
        stop(s, STACK, (uint64_t)op);
        return NULL;
    }
    if (v->frozen) {
        stop(s, CHANGED, (uint64_t)op);
        return NULL;
    }
    return v;
}

static int keys(Scan *s, const uint32_t *items, size_t count, int op, int pairs) {
    if (pairs && count % 2)
        return stop(s, STACK, (uint64_t)op);
    for (size_t i = 0; i < count; i += pairs ? 2 : 1)
        if ((items[i] & (IMMEDIATE | NOT_KEY)) != IMMEDIATE)  /* containers are no keys */
            return stop(s, BADKEY, (uint64_t)op);
    return 0;
}

/* The items from start up become one new container of kind, pushed in their place. */
static int container(Scan *s, size_t start, int kind) {
    size_t count = s->stack.len - start;
    if (build(s, kind) < 0)
        return -1;
    uint32_t made = s->stack.items[--s->stack.len];
    if (add(s, &s->values[made], s->stack.items + start, count) < 0)
        return -1;
    s->stack.len = start;
    push(s, made);
    return 0;
}

static inline void push_reference(Scan *s, uint32_t r) {
    if (!(r & IMMEDIATE))
        s->values[r].frozen = 1;  /* referenced twice now: its weight is final */
    push(s, r);
}

static inline int get(Scan *s, uint64_t index) {
    if (index >= s->memo.len)
        return stop(s, MEMO, index);
    push_reference(s, s->memo.items[index]);
    return 0;
}

static inline int put(Scan *s, uint64_t index, int op) {
    if (need(s, 1, op) < 0)
        return -1;
    if (index > s->memo.len)
        return stop(s, MEMO, index);
    if (index == s->memo.len)
        s->memo.len++;
    s->memo.items[index] = s->stack.items[s->stack.len - 1];
    return 0;
}

static int have(Scan *s, size_t pos, uint64_t count) {
    if (count > s->size - pos)
        return stop(s, TRUNCATED, count - (s->size - pos));
    return 0;
}

static uint64_t little(const unsigned char *p, int width) {
    uint64_t x = 0;
    for (int i = width - 1; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
}

/* The line from pos: its length (without the newline) in *len. */
static int line(Scan *s, size_t pos, size_t *len) {
    const unsigned char *end = memchr(s->data + pos, '\n', s->size - pos);
    if (end == NULL)
        return stop(s, TRUNCATED, 1);
    *len = (size_t)(end - (s->data + pos));
    return 0;
}

static int text_index(Scan *s, size_t pos, size_t len, int op, uint64_t *index) {
    if (len == 0 || len > SHORT_DIGITS)
        return stop(s, OPCODE, (uint64_t)op);
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = s->data[pos + i];
        if (c < '0' || c > '9')
            return stop(s, OPCODE, (uint64_t)op);
        x = x * 10 + (c - '0');
    }
    *index = x;
    return 0;
}

/* Runs the opcodes: 0 at STOP or a global, -1 with s->why set (or a Python error: why -1).
 * Each opcode's code ends by jumping to the next one's through the table (GCC's and clang's
 * labels as values): a jump of its own per opcode is predicted far better than one switch's. */
/* Stops the scan (why, number) at the opcode being run. */
#define FAIL(why, number)                                                                          \
    do {                                                                                           \
        stop(s, why, number);                                                                      \
        goto fail;                                                                                 \
    } while (0)

#define NEXT()                                                                                     \
    do {                                                                                           \
        at = pos;                                                                                  \
        if (pos >= size)                                                                           \
            FAIL(TRUNCATED, 1);                                                                    \
        op = data[pos++];                                                                          \
        goto *code[op];                                                                            \
    } while (0)

static int run(Scan *s) {
    static const void *const code[256] = {
        [0 ... 255] = &&no_opcode,
        ['.'] = &&stop_op,
        ['c'] = &&global, ['i'] = &&global, [0x82] = &&global, [0x83] = &&global,
        [0x84] = &&global, [0x93] = &&global,
        ['R'] = &&not_data, ['b'] = &&not_data, ['P'] = &&not_data, ['Q'] = &&not_data,
        ['o'] = &&not_data, [0x81] = &&not_data, [0x92] = &&not_data, [0x97] = &&not_data,
        [0x98] = &&not_data,
        ['h'] = &&binget, ['j'] = &&long_binget, [0x94] = &&memoize, ['q'] = &&binput,
        ['r'] = &&long_binput, ['('] = &&mark,
        ['K'] = &&binint, ['M'] = &&binint, ['J'] = &&binint,
        ['N'] = &&constant, [0x88] = &&constant, [0x89] = &&constant,
        [0x8c] = &&counted, ['U'] = &&counted, ['C'] = &&counted, ['X'] = &&counted,
        ['T'] = &&counted, ['B'] = &&counted, [0x8d] = &&counted, [0x8e] = &&counted,
        [0x96] = &&counted,
        [0x8a] = &&long_n, [0x8b] = &&long_n,
        ['G'] = &&binfloat,
        [']'] = &&empty, ['}'] = &&empty, [0x8f] = &&empty, [')'] = &&empty_tuple,
        [0x85] = &&tuple_n, [0x86] = &&tuple_n, [0x87] = &&tuple_n,
        ['t'] = &&from_mark, ['l'] = &&from_mark, ['d'] = &&keyed_from_mark,
        [0x91] = &&keyed_from_mark,
        ['a'] = &&append_op, ['s'] = &&setitem, ['e'] = &&extend, ['u'] = &&extend,
        [0x90] = &&extend,
        ['0'] = &&pop, ['1'] = &&pop_mark_op, ['2'] = &&dup, [0x95] = &&frame, [0x80] = &&proto,
        ['g'] = &&text_memo, ['p'] = &&text_memo, ['I'] = &&text_int, ['L'] = &&text_int,
        ['F'] = &&text_value, ['S'] = &&text_value, ['V'] = &&text_value,
    };
    const unsigned char *data = s->data;
    size_t size = s->size, pos = 0, at = 0, len, start;
    uint64_t count, index;
    int op, width;
    Value *t;
    NEXT();
stop_op:  /* STOP */
    if (need(s, 1, op) < 0)
        goto fail;
    return 0;
global:  /* GLOBAL, INST, EXT1/2/4, STACK_GLOBAL: the unpickler refuses them */
    return 0;
not_data:  /* REDUCE, BUILD, PERSID, BINPERSID, OBJ, NEWOBJ(_EX), NEXT_BUFFER, READONLY_BUFFER */
    FAIL(NOT_DATA, (uint64_t)op);
no_opcode:
    FAIL(OPCODE, (uint64_t)op);
binget:
    if (have(s, pos, 1) < 0 || get(s, data[pos]) < 0)
        goto fail;
    pos += 1;
    NEXT();
long_binget:
    if (have(s, pos, 4) < 0 || get(s, little(s->data + pos, 4)) < 0)
        goto fail;
    pos += 4;
    NEXT();
memoize:
    if (put(s, s->memo.len, op) < 0)
        goto fail;
    NEXT();
binput:
    if (have(s, pos, 1) < 0 || put(s, data[pos], op) < 0)
        goto fail;
    pos += 1;
    NEXT();
long_binput:
    if (have(s, pos, 4) < 0 || put(s, little(s->data + pos, 4), op) < 0)
        goto fail;
    pos += 4;
    NEXT();
mark:
    s->marks[s->nmarks++] = s->stack.len;  /* room for one a byte, as in push() */
    NEXT();
binint:  /* BININT1, BININT2, BININT */
    width = op == 'K' ? 1 : op == 'M' ? 2 : 4;
    if (have(s, pos, (uint64_t)width) < 0 || scalar(s, (uint64_t)width, KEY) < 0)
        goto fail;
    pos += (size_t)width;
    NEXT();
constant:  /* NONE, NEWTRUE, NEWFALSE */
    if (scalar(s, 0, KEY) < 0)
        goto fail;
    NEXT();
counted:
    /* SHORT_BINUNICODE, SHORT_BINSTRING, SHORT_BINBYTES, BINUNICODE, BINSTRING, BINBYTES,
     * BINUNICODE8, BINBYTES8, BYTEARRAY8: a length, then as many bytes */
    width = (op == 0x8c || op == 'U' || op == 'C')   ? 1
            : (op == 'X' || op == 'T' || op == 'B') ? 4
                                                    : 8;
    if (have(s, pos, (uint64_t)width) < 0)
        goto fail;
    count = little(s->data + pos, width);
    if (op == 'T' && count >= 0x80000000u)
        FAIL(OPCODE, (uint64_t)op);  /* BINSTRING's length is signed */
    if (have(s, pos + (size_t)width, count) < 0 || scalar(s, count, op == 0x96 ? SCALAR : KEY) < 0)
        goto fail;
    pos += (size_t)width + (size_t)count;
    NEXT();
long_n:  /* LONG1, LONG4: a length, then the int's bytes */
    width = op == 0x8a ? 1 : 4;
    if (have(s, pos, (uint64_t)width) < 0)
        goto fail;
    count = little(s->data + pos, width);
    if (op == 0x8b && count >= 0x80000000u)
        FAIL(OPCODE, (uint64_t)op);
    if (have(s, pos + (size_t)width, count) < 0)
        goto fail;
    if (count > LONG_BYTES)
        FAIL(NUMBER, count);
    if (scalar(s, count, count <= 7 ? KEY : SCALAR) < 0)
        goto fail;
    pos += (size_t)width + (size_t)count;
    NEXT();
binfloat:
    if (have(s, pos, 8) < 0 || scalar(s, 0, SCALAR) < 0)
        goto fail;
    pos += 8;
    NEXT();
empty:  /* EMPTY_LIST, EMPTY_DICT, EMPTY_SET */
    if (build(s, op == ']' ? LIST : op == '}' ? DICT : SET) < 0)
        goto fail;
    NEXT();
empty_tuple:
    if (build(s, TUPLE) < 0)
        goto fail;
    NEXT();
tuple_n:  /* TUPLE1, TUPLE2, TUPLE3 */
    if (need(s, (size_t)(op - 0x84), op) < 0 ||
        container(s, s->stack.len - (size_t)(op - 0x84), TUPLE) < 0)
        goto fail;
    NEXT();
from_mark:  /* TUPLE, LIST */
    if (pop_mark(s, op, &start) < 0 || container(s, start, op == 't' ? TUPLE : LIST) < 0)
        goto fail;
    NEXT();
keyed_from_mark:  /* DICT, FROZENSET */
    if (pop_mark(s, op, &start) < 0 ||
        keys(s, s->stack.items + start, s->stack.len - start, op, op == 'd') < 0 ||
        container(s, start, op == 'd' ? DICT : FROZENSET) < 0)
        goto fail;
    NEXT();
append_op:
    if (need(s, 2, op) < 0 || (t = target(s, s->stack.len - 2, LIST, op)) == NULL ||
        add(s, t, s->stack.items + s->stack.len - 1, 1) < 0)
        goto fail;
    s->stack.len -= 1;
    NEXT();
setitem:
    if (need(s, 3, op) < 0 || (t = target(s, s->stack.len - 3, DICT, op)) == NULL ||
        keys(s, s->stack.items + s->stack.len - 2, 2, op, 1) < 0 ||
        add(s, t, s->stack.items + s->stack.len - 2, 2) < 0)
        goto fail;
    s->stack.len -= 2;
    NEXT();
extend:  /* APPENDS, SETITEMS, ADDITEMS */
    if (pop_mark(s, op, &start) < 0)
        goto fail;
    if (start == 0)  /* no container below the items */
        FAIL(STACK, (uint64_t)op);
    t = target(s, start - 1, op == 'e' ? LIST : op == 'u' ? DICT : SET, op);
    if (t == NULL ||
        (op != 'e' && keys(s, s->stack.items + start, s->stack.len - start, op, op == 'u') < 0) ||
        add(s, t, s->stack.items + start, s->stack.len - start) < 0)
        goto fail;
    s->stack.len = start;
    NEXT();
pop:  /* the item on top, or a mark with nothing above it */
    if (s->nmarks && s->marks[s->nmarks - 1] == s->stack.len) {
        s->nmarks--;
    } else {
        if (need(s, 1, op) < 0)
            goto fail;
        s->stack.len -= 1;
    }
    NEXT();
pop_mark_op:
    if (pop_mark(s, op, &start) < 0)
        goto fail;
    s->stack.len = start;
    NEXT();
dup:
    if (need(s, 1, op) < 0)
        goto fail;
    push_reference(s, s->stack.items[s->stack.len - 1]);
    NEXT();
frame:  /* how many bytes the next opcodes take */
    if (have(s, pos, 8) < 0 || have(s, pos + 8, little(s->data + pos, 8)) < 0)
        goto fail;
    pos += 8;
    NEXT();
proto:
    if (have(s, pos, 1) < 0)
        goto fail;
    if (data[pos] > 5)
        FAIL(OPCODE, data[pos]);
    pos += 1;
    NEXT();
text_memo:  /* GET, PUT: a decimal index on a line */
    if (line(s, pos, &len) < 0 || text_index(s, pos, len, op, &index) < 0 ||
        (op == 'g' ? get(s, index) : put(s, index, op)) < 0)
        goto fail;
    pos += len + 1;
    NEXT();
text_int:  /* INT, LONG: a decimal number on a line ("01" is True) */
    if (line(s, pos, &len) < 0)
        goto fail;
    count = len - (op == 'L' && len && data[pos + len - 1] == 'L');
    if (count > LONG_DIGITS)
        FAIL(NUMBER, count);
    if (scalar(s, count, count <= SHORT_DIGITS ? KEY : SCALAR) < 0)
        goto fail;
    pos += len + 1;
    NEXT();
text_value:  /* FLOAT, STRING, UNICODE: the value on a line */
    if (line(s, pos, &len) < 0 || scalar(s, op == 'F' ? 0 : len, op == 'F' ? SCALAR : KEY) < 0)
        goto fail;
    pos += len + 1;
    NEXT();
fail:
    s->at = at;
    return -1;
}

/* The arrays of the last scan, kept for the next up to a dump of 2.7 MB: fresh from the system,
 * the pages a dump's scan touches cost page faults worth a fifth of it. Only with the GIL. */
#define KEPT_BYTES (64u << 20)
static Scan kept;

static void keep(void **items, size_t *cap, size_t width) {
    if (*cap * width > KEPT_BYTES) {
        free(*items);
        *items = NULL;
        *cap = 0;
    }
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    unsigned long long max_objects, max_bytes, max_depth;
    if (!PyArg_ParseTuple(args, "y*KKK", &data, &max_objects, &max_bytes, &max_depth))
        return NULL;
    if (max_objects > (1ULL << 32) || max_bytes > SCALAR_BYTES || max_depth > 60000 ||
        data.len >= (1LL << 31)) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "bounds over 2^32 (bytes: 2^30) or a pickle over 2 GiB");
        return NULL;
    }
    Scan s = kept;
    s.stack.len = s.memo.len = s.nvalues = s.nmarks = 0;
    s.data = data.buf;
    s.size = (size_t)data.len;
    s.max_objects = max_objects;
    s.max_bytes = max_bytes;
    s.max_depth = max_depth;
    s.built = s.number = 0;
    s.why = 0;
    size_t room = s.size + 1;
    int failed = grow(&s, (void **)&s.values, &s.capvalues, room, sizeof(Value)) < 0 ||
                 grow(&s, (void **)&s.stack.items, &s.stack.cap, room, sizeof(uint32_t)) < 0 ||
                 grow(&s, (void **)&s.memo.items, &s.memo.cap, room, sizeof(uint32_t)) < 0 ||
                 grow(&s, (void **)&s.marks, &s.capmarks, room, sizeof(size_t)) < 0 || run(&s) < 0;
    keep((void **)&s.values, &s.capvalues, sizeof(Value));
    keep((void **)&s.stack.items, &s.stack.cap, sizeof(uint32_t));
    keep((void **)&s.memo.items, &s.memo.cap, sizeof(uint32_t));
    keep((void **)&s.marks, &s.capmarks, sizeof(size_t));
    kept = s;
    PyBuffer_Release(&data);
    if (failed == 0)
        Py_RETURN_NONE;
    if (s.why < 0)
        return NULL;  /* out of memory: the Python error is set */
    return Py_BuildValue("(inK)", s.why, (Py_ssize_t)s.at, (unsigned long long)s.number);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, max_objects, max_bytes, max_depth) -> None or (why, at, number)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pickscan", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pickscan(void) { return PyModule_Create(&module); }
