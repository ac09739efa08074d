/* Every entry point of every op, fp_ and hp_, with sizes whose element or byte counts leave int
 * (hidden = 2^29: 4 * hidden is 2^31) or long long (every size INT32_MAX: 4 * hidden * T), built
 * with -fsanitize=undefined: each must give ERR_SIZE (2) without one step of undefined arithmetic.
 * The pointers hold no memory: a call that got past its size check would crash.  Prints one line
 * per call that gave anything else, then "bad <count>". */
#include <stdint.h>
#include <stdio.h>

#include "layernormgrad.h"
#include "lstm.h"
#include "lstmcellgrad.h"
#include "lstmgrad.h"

static int bad = 0;

static void *fake(int k) {
    return (void *)(uintptr_t)((sizeof(void *) > 4 ? (uintptr_t)1 << 40 : 0x10000000u) +
                               (uintptr_t)k * (sizeof(void *) > 4 ? (uintptr_t)1 << 36 : 0x100u));
}

static void expect(const char *entry, int i, int got) {
    if (got != 2) {
        printf("%s, case %d: %d\n", entry, i, got);
        ++bad;
    }
}

static char ws[64];

/* the seven forms of the entry points E with the arguments ARGS (up to the core mask), their
 * workspace query with SIZES, the void forms' status from STATUS() */
#define EVERY_FORM(E, STATUS, SIZES, ...)                                          \
    do {                                                                           \
        size_t bytes_;                                                             \
        expect(#E "_s_r", i, E##_s_r(__VA_ARGS__, 1));                             \
        expect(#E "_p_r", i, E##_p_r(__VA_ARGS__));                                \
        expect(#E "_s_w", i, E##_s_w(__VA_ARGS__, 1, ws, sizeof ws));              \
        expect(#E "_p_w", i, E##_p_w(__VA_ARGS__, ws, sizeof ws));                 \
        E##_s(__VA_ARGS__, 1);                                                     \
        expect(#E "_s", i, STATUS());                                              \
        E##_p(__VA_ARGS__);                                                        \
        expect(#E "_p", i, STATUS());                                              \
        expect(#E "_workspace", i, E##_workspace SIZES);                           \
    } while (0)

#define LSTM(P)                                                                                           \
    EVERY_FORM(P##_lstm, fg_lstm_status, (T, B, H, &bytes_), fake(0), fake(1), fake(2), fake(3), fake(4), \
               T, B, H, 0, fake(5), fake(6), fake(7), fake(8), fake(9), fake(10), fake(11), fake(12),   \
               fake(13))
#define LSTMGRAD(P)                                                                                        \
    EVERY_FORM(P##_lstmgrad, fg_lstmgrad_status, (T, B, H, &bytes_), fake(0), fake(1), fake(2), fake(3),   \
               fake(4), fake(5), fake(6), fake(7), fake(8), fake(9), fake(10), fake(11), T, B, H, 1,       \
               fake(12), fake(13), fake(14), fake(15))
#define CELL(P)                                                                                            \
    EVERY_FORM(P##_lstmcellgrad, fg_lstmcellgrad_status, (B, H, &bytes_), fake(0), fake(1), fake(2),       \
               fake(3), fake(4), B, H, 1, fake(5), fake(6), fake(7))
#define LN(P)                                                                                              \
    EVERY_FORM(P##_layernormgrad, fg_layernormgrad_status, (H, B, &bytes_), fake(0), fake(1), fake(2),     \
               fake(3), fake(4), H, B, B, H, fake(5), fake(6), fake(7))

int main(void) {
    const int big = 0x7fffffff;
    /* {T, B, hidden}; the cell takes {B, hidden} as {n, hidden}, LayerNorm as {param_size, param_num} */
    const int sizes[][3] = {{1, 1, 1 << 29}, {1, 1, big}, {big, big, big}, {1 << 16, 1 << 16, 1 << 16},
                            {big, 1, 1 << 29}, {1, big, 1 << 29}};
    int i;
    for (i = 0; i < (int)(sizeof sizes / sizeof sizes[0]); ++i) {
        const int T = sizes[i][0], B = sizes[i][1], H = sizes[i][2];
        LSTM(fp);
        LSTMGRAD(fp);
        CELL(fp);
        LN(fp);
#ifdef FG_TEST_HALF
        LSTM(hp);
        LSTMGRAD(hp);
        CELL(hp);
        LN(hp);
#endif
    }
    printf("bad %d\n", bad);
    return bad != 0;
}
