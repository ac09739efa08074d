// Prints the plans op_host/fg_lstm_plan.h evaluates, one JSON object a line, for the configurations
// read from stdin (a line each: backward D has_biases varlen train need_dx T B I H L), as
// fusedgrad.lstm.symbolic.instance gives them: {"buffers": {name: buffer}, "launches": [...]}.
#include <stdio.h>
#include <string.h>

#include <set>
#include <string>

#include "fg_lstm_plan.h"

static void dims(const uint32_t *exprs, uint8_t rank, const int64_t v[FG_PV_N]) {
    printf("[");
    for (uint8_t k = 0; k < rank; ++k) printf("%s%lld", k ? ", " : "", (long long)fg_plan_eval(exprs[k], v));
    printf("]");
}

int main() {
    int bwd, D, hb, vl, tr, nd;
    long long T, B, I, H, L;
    while (scanf("%d %d %d %d %d %d %lld %lld %lld %lld %lld", &bwd, &D, &hb, &vl, &tr, &nd, &T, &B, &I, &H, &L) == 11) {
        const struct FgPlanVariant *p = fg_plan_find(bwd != 0, D, hb != 0, vl != 0, tr != 0, nd != 0);
        if (!p) {
            printf("null\n");
            continue;
        }
        std::set<std::string> seen;
        bool first = true;
        printf("{\"buffers\": {");
        fg_plan_buffers_of(*p, L, [&](const struct FgPlanBuffer &b, int64_t l) {
            char name[64];
            int64_t v[FG_PV_N];
            if (!fg_plan_name(b.name, l, name, sizeof name) || !seen.insert(name).second) return;
            fg_plan_vars(T, B, I, H, L, l, v);
            printf("%s\"%s\": {\"name\": \"%s\", \"shape\": ", first ? "" : ", ", name, name);
            dims(b.shape, b.rank, v);
            printf(", \"dtype\": \"%s\", \"role\": \"%s\", \"zero\": %s}", fg_plan_dtypes[b.dtype], fg_plan_roles[b.role],
                   b.zero ? "true" : "false");
            first = false;
        });
        printf("}, \"launches\": [");
        first = true;
        fg_plan_walk(*p, L, [&](const struct FgPlanLaunch &x, int64_t l) {
            int64_t v[FG_PV_N];
            fg_plan_vars(T, B, I, H, L, l, v);
            printf("%s{\"op\": \"%s\", \"variant\": {", first ? "" : ", ", fg_plan_ops[x.op]);
            bool f = true;
            for (uint32_t k = 0; k < sizeof fg_plan_flags / sizeof fg_plan_flags[0]; ++k) {
                if (!(x.flags_set >> k & 1u)) continue;
                printf("%s\"%s\": %s", f ? "" : ", ", fg_plan_flags[k], x.flags_on >> k & 1u ? "true" : "false");
                f = false;
            }
            printf("}, \"args\": [");
            for (uint32_t a = 0; a < x.nargs; ++a) {
                const struct FgPlanArg &arg = fg_plan_args[x.first_arg + a];
                const struct FgPlanView &w = fg_plan_views[arg.view];
                char name[64];
                if (!fg_plan_name(arg.buffer, l, name, sizeof name)) strcpy(name, "?");
                printf("%s{\"param\": \"%s\", \"io\": \"%s\", \"buffer\": \"%s\", \"view\": {\"offset\": %lld, \"shape\": ",
                       a ? ", " : "", fg_plan_params[arg.param], arg.out ? "out" : "in", name, (long long)fg_plan_eval(w.offset, v));
                dims(w.shape, w.rank, v);
                printf(", \"strides\": ");
                dims(w.strides, w.rank, v);
                printf("}}");
            }
            printf("]}");
            first = false;
        });
        printf("]}\n");
    }
    return 0;
}
