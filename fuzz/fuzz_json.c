/* fuzz_json.c — libFuzzer target for the JSON parser (`make fuzz`, then `make fuzz-run`; seeds in
 * fuzz/corpus/fuzz_json). Parses the input in both UTF-8 modes with a
 * small depth limit, walks the tree checking its invariants, and round-trips every string through
 * the writer and the parser again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"

static void walk(const struct json_value *v, struct json_out *o, int depth) {
    TKV_ASSERT(depth <= 40);
    switch (v->type) {
    case JSON_STRING:
        TKV_ASSERT(v->u.str.s[v->u.str.len] == 0);
        json_out_strn(o, v->u.str.s, v->u.str.len);
        break;
    case JSON_ARRAY:
        json_out_arr_begin(o);
        for (size_t i = 0; i < v->u.arr.n; i++) walk(json_at(v, i), o, depth + 1);
        json_out_arr_end(o);
        break;
    case JSON_OBJECT:
        json_out_obj_begin(o);
        for (size_t i = 0; i < v->u.obj.n; i++) {
            const struct json_member *m = &v->u.obj.members[i];
            TKV_ASSERT(m->key[m->key_len] == 0);
            json_out_key(o, m->key);
            walk(&m->value, o, depth + 1);
        }
        json_out_obj_end(o);
        break;
    case JSON_NUMBER: json_out_num(o, v->u.num); break;
    case JSON_TRUE: json_out_bool(o, 1); break;
    case JSON_FALSE: json_out_bool(o, 0); break;
    case JSON_NULL: json_out_null(o); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    for (int replace = 0; replace < 2; replace++) {
        struct json_opts opts = {.max_depth = 40, .replace_invalid = replace};
        struct json_doc *d = NULL;
        /* a heap copy of exactly size bytes, so ASan catches any read past the end */
        char *buf = malloc(size ? size : 1);
        if (size) memcpy(buf, data, size);
        if (json_parse(buf, size, &opts, &d, err, sizeof err) == 0) {
            struct json_out o;
            json_out_init(&o);
            walk(json_root(d), &o, 0);
            /* what the writer produced must parse again (it is valid UTF-8 and JSON) */
            struct json_doc *d2 = NULL;
            if (json_parse(o.b.p, o.b.n, &opts, &d2, err, sizeof err) != 0) TKV_ASSERT(!"writer output does not parse");
            json_free(d2);
            json_out_free(&o);
            json_free(d);
        } else {
            TKV_ASSERT(d == NULL && strncmp(err, "json: ", 6) == 0);
        }
        free(buf);
    }
    return 0;
}
