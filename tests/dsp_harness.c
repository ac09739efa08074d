/* Test harness for the DSP library (generated/dsp/<chip>): runs one entry point on arrays read from
 * a file and writes its outputs to another, so that the same Python checks apply to a host build
 * and to cross builds run under qemu-user.
 *
 *   harness ln   fp|hp M D MASK              IN OUT   x, dy, var, mean, gamma -> dx, dg, db
 *   harness cell fp|hp N H BIAS DHY DC MASK  IN OUT   [dhy], [dc], cx, cy, storage -> dgates, dc_prev, db
 *
 * MASK 0 calls the _p entry point, any other value _s with that core_mask.  DHY/DC 0 pass NULL.
 * Arrays are raw little-endian element data, one after the other; the status goes to stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layernormgrad.h"
#include "lstmcellgrad.h"

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
    fprintf(stderr, "usage: harness ln fp|hp M D MASK IN OUT | harness cell fp|hp N H BIAS DHY DC MASK IN OUT\n");
    return 2;
}
