/* Brute-force Hamming nearest neighbours of 256-bit binary descriptors (ORB), both ways.
 *
 * The key-frame test matches 500 x 500 descriptors per frame with cross-check, exactly like
 * cv2.BFMatcher(NORM_HAMMING, crossCheck=True). A popcount loop over the full distance matrix
 * is several times cheaper than the float matrix-product fallback in keyframes.py, which is
 * what keeps the extractor's per-frame cost close to ORB's own. Ties keep the lowest index,
 * as OpenCV does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WORDS 4 /* 32-byte descriptors */

static PyObject *best_matches(PyObject *self, PyObject *args) {
    Py_buffer a, b, row_idx, row_dist, col_idx;
    if (!PyArg_ParseTuple(args, "y*y*w*w*w*", &a, &b, &row_idx, &row_dist, &col_idx)) {
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t n1 = a.len / 32, n2 = b.len / 32;
    if (a.len % 32 || b.len % 32 || row_idx.len != n1 * 4 || row_dist.len != n1 * 4 ||
        col_idx.len != n2 * 4) {
        PyErr_SetString(PyExc_ValueError, "expected (n, 32) uint8 descriptors and int32 outputs");
        goto done;
    }
    uint64_t *A = malloc((size_t)(n1 > 0 ? n1 : 1) * 32);
    uint64_t *B = malloc((size_t)(n2 > 0 ? n2 : 1) * 32);
    int32_t *col_dist = malloc((size_t)(n2 > 0 ? n2 : 1) * sizeof(int32_t));
    if (!A || !B || !col_dist) {
        free(A);
        free(B);
        free(col_dist);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(A, a.buf, (size_t)n1 * 32); /* aligned copies: the inputs may be unaligned */
    memcpy(B, b.buf, (size_t)n2 * 32);
    int32_t *ri = (int32_t *)row_idx.buf, *rd = (int32_t *)row_dist.buf;
    int32_t *ci = (int32_t *)col_idx.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < n2; j++) {
        col_dist[j] = INT_MAX;
        ci[j] = -1;
    }
    for (Py_ssize_t i = 0; i < n1; i++) {
        const uint64_t *x = A + i * WORDS;
        const uint64_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
        int32_t best = INT_MAX, best_j = -1;
        for (Py_ssize_t j = 0; j < n2; j++) {
            const uint64_t *y = B + j * WORDS;
            const int32_t d = __builtin_popcountll(x0 ^ y[0]) + __builtin_popcountll(x1 ^ y[1]) +
                              __builtin_popcountll(x2 ^ y[2]) + __builtin_popcountll(x3 ^ y[3]);
            if (d < best) {
                best = d;
                best_j = (int32_t)j;
            }
            if (d < col_dist[j]) {
                col_dist[j] = d;
                ci[j] = (int32_t)i;
            }
        }
        ri[i] = best_j;
        rd[i] = best;
    }
    Py_END_ALLOW_THREADS
    free(A);
    free(B);
    free(col_dist);
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&row_idx);
    PyBuffer_Release(&row_dist);
    PyBuffer_Release(&col_idx);
    return result;
}

static PyMethodDef methods[] = {
    {"best_matches", best_matches, METH_VARARGS,
     "best_matches(a, b, row_idx, row_dist, col_idx): nearest b for each a (index, distance) "
     "and nearest a for each b, by Hamming distance of 32-byte descriptors."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hamming", "Brute-force Hamming matching of ORB descriptors.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__hamming(void) { return PyModule_Create(&module); }
