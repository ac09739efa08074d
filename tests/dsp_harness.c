/* Test harness for the DSP library (generated/dsp/<chip>): runs one entry point on arrays read from
 * a file and writes its outputs to another, so that the same Python checks apply to a host build
 * and to cross builds run under qemu-user.
 *
 *   harness ln   fp|hp M D MASK              IN OUT   x, dy, var, mean, gamma -> dx, dg, db
 *   harness cell fp|hp N H BIAS DHY DC MASK  IN OUT   [dhy], [dc], cx, cy, storage -> dgates, dc_prev, db
 *   harness lstm fp|hp T B H REV TRAIN MASK   IN OUT   batch_sizes (int32), xw, w_hh, h0, c0
 *                                                      -> h, [c, i, f, g, o, tanhc], hy, cy
 *   harness lstmgrad fp|hp T B H REV MASK     IN OUT   batch_sizes (int32), dy, w_hh, c, c0, i, f, g, o,
 *                                                      tanhc, grad_hy, grad_cy -> dgates, dgates_t, dh0, dc0
 *
 * MASK 0 calls the _p entry point, any other value _s with that core_mask.  DHY/DC 0 pass NULL.
 * Arrays are raw little-endian element data, one after the other; the status goes to stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layernormgrad.h"
#include "lstmcellgrad.h"
#include "lstm.h"
#include "lstmgrad.h"

#define F(x) ((float *)(void *)(x)) /* the LSTM layer's arrays, read as bytes, as float or half */
#define HF(x) ((half *)(void *)(x))

static void *read_all(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    void *p = malloc(want ? want : 1);
    if (!f || !p || fread(p, 1, want, f) != want) {
        fprintf(stderr, "harness: cannot read %lu bytes from %s\n", (unsigned long)want, path);
        exit(2);
    }
    fclose(f);
    return p;
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "harness: cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

int main(int argc, char **argv) {
    int is_half = argc > 2 && strcmp(argv[2], "hp") == 0;
    size_t es = is_half ? 2 : 4;
    if (argc == 8 && strcmp(argv[1], "ln") == 0) {
        int M = atoi(argv[3]), D = atoi(argv[4]), mask = (int)strtol(argv[5], NULL, 0);
        size_t md = (size_t)M * (size_t)D, in_n = 2 * md + 2 * (size_t)M + (size_t)D, out_n = md + 2 * (size_t)D;
        char *in = (char *)read_all(argv[6], in_n * es), *out = (char *)calloc(out_n, es);
        char *x = in, *dy = x + md * es, *var = dy + md * es, *mean = var + (size_t)M * es, *gamma = mean + (size_t)M * es;
        char *dx = out, *dg = dx + md * es, *db = dg + (size_t)D * es;
        if (!is_half) {
            if (mask) {
                fp_layernormgrad_s((float *)x, (float *)dy, (float *)var, (float *)mean, (float *)gamma, D, M, M, D,
                                   (float *)dx, (float *)dg, (float *)db, mask);
            } else {
                fp_layernormgrad_p((float *)x, (float *)dy, (float *)var, (float *)mean, (float *)gamma, D, M, M, D,
                                   (float *)dx, (float *)dg, (float *)db);
            }
        } else {
#ifdef HARNESS_HALF
            if (mask) {
                hp_layernormgrad_s((half *)x, (half *)dy, (half *)var, (half *)mean, (half *)gamma, D, M, M, D,
                                   (half *)dx, (half *)dg, (half *)db, mask);
            } else {
                hp_layernormgrad_p((half *)x, (half *)dy, (half *)var, (half *)mean, (half *)gamma, D, M, M, D,
                                   (half *)dx, (half *)dg, (half *)db);
            }
#else
            fprintf(stderr, "harness: this chip has no hp_ entry points\n");
            return 2;
#endif
        }
        printf("%d\n", fg_layernormgrad_status());
        write_all(argv[7], out, out_n * es);
        return 0;
    }
    if (argc == 11 && strcmp(argv[1], "cell") == 0) {
        int N = atoi(argv[3]), H = atoi(argv[4]), bias = atoi(argv[5]), has_dhy = atoi(argv[6]);
        int has_dc = atoi(argv[7]), mask = (int)strtol(argv[8], NULL, 0);
        size_t nh = (size_t)N * (size_t)H;
        size_t in_n = (size_t)(has_dhy + has_dc + 2) * nh + 4 * nh, out_n = 4 * nh + nh + 4 * (size_t)H;
        char *in = (char *)read_all(argv[9], in_n * es), *out = (char *)calloc(out_n, es), *p = in;
        char *dhy = NULL, *dc = NULL, *cx, *cy, *storage;
        char *dgates = out, *dc_prev = dgates + 4 * nh * es, *db = dc_prev + nh * es;
        if (has_dhy) {
            dhy = p;
            p += nh * es;
        }
        if (has_dc) {
            dc = p;
            p += nh * es;
        }
        cx = p;
        cy = cx + nh * es;
        storage = cy + nh * es;
        if (!is_half) {
            if (mask) {
                fp_lstmcellgrad_s((float *)dhy, (float *)dc, (float *)cx, (float *)cy, (float *)storage, N, H, bias,
                                  (float *)dgates, (float *)dc_prev, (float *)db, mask);
            } else {
                fp_lstmcellgrad_p((float *)dhy, (float *)dc, (float *)cx, (float *)cy, (float *)storage, N, H, bias,
                                  (float *)dgates, (float *)dc_prev, (float *)db);
            }
        } else {
#ifdef HARNESS_HALF
            if (mask) {
                hp_lstmcellgrad_s((half *)dhy, (half *)dc, (half *)cx, (half *)cy, (half *)storage, N, H, bias,
                                  (half *)dgates, (half *)dc_prev, (half *)db, mask);
            } else {
                hp_lstmcellgrad_p((half *)dhy, (half *)dc, (half *)cx, (half *)cy, (half *)storage, N, H, bias,
                                  (half *)dgates, (half *)dc_prev, (half *)db);
            }
#else
            fprintf(stderr, "harness: this chip has no hp_ entry points\n");
            return 2;
#endif
        }
        printf("%d\n", fg_lstmcellgrad_status());
        write_all(argv[10], out, out_n * es);
        return 0;
    }
    if ((argc == 11 && strcmp(argv[1], "lstm") == 0) || (argc == 10 && strcmp(argv[1], "lstmgrad") == 0)) {
        int grad = argc == 10, T = atoi(argv[3]), B = atoi(argv[4]), H = atoi(argv[5]), rev = atoi(argv[6]);
        int train = grad ? 1 : atoi(argv[7]), mask = (int)strtol(argv[grad ? 7 : 8], NULL, 0);
        size_t tbh = (size_t)T * (size_t)B * (size_t)H, bh = (size_t)B * (size_t)H, hh = (size_t)H * (size_t)H;
        size_t in_n = grad ? 7 * tbh + 4 * hh + 3 * bh : 4 * tbh + 4 * hh + 2 * bh;
        size_t out_n = grad ? 8 * tbh + 2 * bh : (train ? 7 : 1) * tbh + 2 * bh;
        char *in = (char *)read_all(argv[grad ? 8 : 9], sizeof(int32_t) * (size_t)T + in_n * es);
        char *p = in + sizeof(int32_t) * (size_t)T, *out = (char *)calloc(out_n ? out_n : 1, es);
        int32_t *bs = (int32_t *)(void *)in;
#ifndef HARNESS_HALF
        if (is_half) {
            fprintf(stderr, "harness: this chip has no hp_ entry points\n");
            return 2;
        }
#endif
        if (!grad) {
            char *xw = p, *w = xw + 4 * tbh * es, *h0 = w + 4 * hh * es, *c0 = h0 + bh * es, *h = out, *s[6], *hy, *cy;
            int k;
            for (k = 0; k < 6; ++k) {
                s[k] = train ? out + (size_t)(1 + k) * tbh * es : NULL;
            }
            hy = out + (train ? 7 : 1) * tbh * es;
            cy = hy + bh * es;
            if (!is_half) {
                if (mask) {
                    fp_lstm_s(F(xw), F(w), F(h0), F(c0), bs, T, B, H, rev, F(h), F(s[0]), F(s[1]), F(s[2]), F(s[3]),
                              F(s[4]), F(s[5]), F(hy), F(cy), mask);
                } else {
                    fp_lstm_p(F(xw), F(w), F(h0), F(c0), bs, T, B, H, rev, F(h), F(s[0]), F(s[1]), F(s[2]), F(s[3]),
                              F(s[4]), F(s[5]), F(hy), F(cy));
                }
            } else {
#ifdef HARNESS_HALF
                if (mask) {
                    hp_lstm_s(HF(xw), HF(w), HF(h0), HF(c0), bs, T, B, H, rev, HF(h), HF(s[0]), HF(s[1]), HF(s[2]),
                              HF(s[3]), HF(s[4]), HF(s[5]), HF(hy), HF(cy), mask);
                } else {
                    hp_lstm_p(HF(xw), HF(w), HF(h0), HF(c0), bs, T, B, H, rev, HF(h), HF(s[0]), HF(s[1]), HF(s[2]),
                              HF(s[3]), HF(s[4]), HF(s[5]), HF(hy), HF(cy));
                }
#endif
            }
            printf("%d\n", fg_lstm_status());
        } else {
            char *dy = p, *w = dy + tbh * es, *c = w + 4 * hh * es, *c0 = c + tbh * es, *i = c0 + bh * es;
            char *f = i + tbh * es, *g = f + tbh * es, *o = g + tbh * es, *tc = o + tbh * es, *ghy = tc + tbh * es;
            char *gcy = ghy + bh * es, *dg = out, *dgt = dg + 4 * tbh * es, *dh0 = dgt + 4 * tbh * es, *dc0 = dh0 + bh * es;
            if (!is_half) {
                if (mask) {
                    fp_lstmgrad_s(F(dy), F(w), F(c), F(c0), F(i), F(f), F(g), F(o), F(tc), F(ghy), F(gcy), bs, T, B, H,
                                  rev, F(dg), F(dgt), F(dh0), F(dc0), mask);
                } else {
                    fp_lstmgrad_p(F(dy), F(w), F(c), F(c0), F(i), F(f), F(g), F(o), F(tc), F(ghy), F(gcy), bs, T, B, H,
                                  rev, F(dg), F(dgt), F(dh0), F(dc0));
                }
            } else {
#ifdef HARNESS_HALF
                if (mask) {
                    hp_lstmgrad_s(HF(dy), HF(w), HF(c), HF(c0), HF(i), HF(f), HF(g), HF(o), HF(tc), HF(ghy), HF(gcy), bs,
                                  T, B, H, rev, HF(dg), HF(dgt), HF(dh0), HF(dc0), mask);
                } else {
                    hp_lstmgrad_p(HF(dy), HF(w), HF(c), HF(c0), HF(i), HF(f), HF(g), HF(o), HF(tc), HF(ghy), HF(gcy), bs,
                                  T, B, H, rev, HF(dg), HF(dgt), HF(dh0), HF(dc0));
                }
#endif
            }
            printf("%d\n", fg_lstmgrad_status());
        }
        write_all(argv[grad ? 9 : 10], out, out_n * es);
        return 0;
    }
    fprintf(stderr, "usage: harness ln fp|hp M D MASK IN OUT | harness cell fp|hp N H BIAS DHY DC MASK IN OUT | "
            "harness lstm fp|hp T B H REV TRAIN MASK IN OUT | harness lstmgrad fp|hp T B H REV MASK IN OUT\n");
    return 2;
}
