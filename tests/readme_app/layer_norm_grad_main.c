/* Calls README.md's DSP example, layer_norm_grad (compiled beside this file from README's C block),
 * on float32 inputs read from a file and writes its outputs to another, for tests/test_readme.py.
 *
 *   main ROWS COLS IN OUT   IN: x, dy [ROWS, COLS], mean, var [ROWS], gamma [COLS], raw float32
 *                           OUT: dx [ROWS, COLS], dgamma, dbeta [COLS]; exit status: the call's
 */
#include <stdio.h>
#include <stdlib.h>

int layer_norm_grad(float *x, float *dy, float *mean, float *var, float *gamma, int rows, int cols,
                    float *dx, float *dgamma, float *dbeta);

int main(int argc, char **argv) {
    int rows, cols, status;
    size_t n_in, n_out, got;
    float *in, *out;
    FILE *f;
    if (argc != 5) return 100;
    rows = atoi(argv[1]);
    cols = atoi(argv[2]);
    n_in = (size_t)rows * cols * 2 + (size_t)rows * 2 + (size_t)cols;
    n_out = (size_t)rows * cols + (size_t)cols * 2;
    in = malloc(n_in * sizeof(float));
    out = malloc(n_out * sizeof(float));
    f = fopen(argv[3], "rb");
    if (!in || !out || !f) return 101;
    got = fread(in, sizeof(float), n_in, f);
    fclose(f);
    if (got != n_in) return 102;
    status = layer_norm_grad(in, in + (size_t)rows * cols, in + (size_t)rows * cols * 2,
                             in + (size_t)rows * cols * 2 + rows, in + (size_t)rows * cols * 2 + 2 * (size_t)rows,
                             rows, cols, out, out + (size_t)rows * cols, out + (size_t)rows * cols + cols);
    f = fopen(argv[4], "wb");
    if (!f || fwrite(out, sizeof(float), n_out, f) != n_out) return 103;
    fclose(f);
    free(in);
    free(out);
    return status;
}
