/* cmd_inspect.c — `tierkv inspect MODEL.gguf [--json]`: version, metadata (long arrays summarised
 * by type, count and first elements; long strings cut), the tensor table, totals per type and the
 * memory the weights need. Text for people, --json (one JSON document, base/json.h's writer) for
 * scripts. Then the file is checked the way
 * `tierkv run` loads it: the vocabulary and, for a file with tensors,
 * the model's configuration and weight binding; a file without tensors is a vocabulary file.
 * Exit 1 on a file that does not parse or does not load (after printing what parsed, so a broken
 * file can be looked at), 2 on bad flags. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cmds.h"
#include "gguf/gguf.h"
#include "tierkv.h"
#include "out.h"

#define STR_CUT 64  /* characters of a string value shown */
#define ARR_SHOW 6  /* elements of an array shown */

static void usage(FILE *out) {
    fprintf(out, "usage: tierkv inspect MODEL.gguf [--json]\n"
                 "  prints version, metadata, tensor table, totals per type and weight memory\n");
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* One scalar at p of type t, printed as a number. */
static void print_scalar(FILE *o, uint32_t t, const uint8_t *p) {
    switch (t) {
    case GGUF_U8: fprintf(o, "%u", (unsigned)p[0]); break;
    case GGUF_I8: fprintf(o, "%d", (int)(int8_t)p[0]); break;
    case GGUF_U16: fprintf(o, "%u", (unsigned)le(p, 2)); break;
    case GGUF_I16: fprintf(o, "%d", (int)(int16_t)le(p, 2)); break;
    case GGUF_U32: fprintf(o, "%" PRIu32, (uint32_t)le(p, 4)); break;
    case GGUF_I32: fprintf(o, "%" PRId32, (int32_t)(uint32_t)le(p, 4)); break;
    case GGUF_U64: fprintf(o, "%" PRIu64, le(p, 8)); break;
    case GGUF_I64: fprintf(o, "%" PRId64, (int64_t)le(p, 8)); break;
    case GGUF_BOOL: fprintf(o, "%s", p[0] ? "true" : "false"); break;
    case GGUF_F32: {
        uint32_t b = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &b, 4);
        fprintf(o, "%.9g", (double)f);
        break;
    }
    case GGUF_F64: {
        uint64_t b = le(p, 8);
        double d;
        memcpy(&d, &b, 8);
        fprintf(o, "%.17g", d);
        break;
    }
    default: fprintf(o, "?");
    }
}

static uint64_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    default: return 8;
    }
}

/* A quoted string, escaped for JSON (valid for text output too), cut to `cut` bytes (0: whole). */
static void print_str(FILE *o, gguf_str s, uint64_t cut) {
    uint64_t n = cut && s.len > cut ? cut : s.len;
    fputc('"', o);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
        else if (c == '\n') fputs("\\n", o);
        else if (c == '\t') fputs("\\t", o);
        else if (c < 0x20 || c == 0x7f) fprintf(o, "\\u%04x", c);
        else fputc(c, o);
    }
    fputc('"', o);
    if (n < s.len) fprintf(o, "...(%" PRIu64 " bytes)", s.len);
}

static void print_value(FILE *o, const gguf_kv *kv) {
    if (kv->type == GGUF_STR) {
        print_str(o, (gguf_str){(const char *)kv->data, kv->size}, STR_CUT);
        return;
    }
    if (kv->type != GGUF_ARR) {
        print_scalar(o, kv->type, kv->data);
        return;
    }
    uint64_t show = kv->arr_n < ARR_SHOW ? kv->arr_n : ARR_SHOW;
    fprintf(o, "[%s x %" PRIu64 "] [", gguf_vtype_name(kv->arr_type), kv->arr_n);
    const uint8_t *p = kv->data;
    for (uint64_t i = 0; i < show; i++) {
        if (i) fputs(", ", o);
        if (kv->arr_type == GGUF_STR) print_str(o, gguf_arr_str_next(&p), 32);
        else {
            print_scalar(o, kv->arr_type, p);
            p += scalar_size(kv->arr_type);
        }
    }
    fputs(show < kv->arr_n ? ", ...]" : "]", o);
}

/* ---- --json, through the JSON writer ---- */

static void json_scalar(struct json_out *j, uint32_t t, const uint8_t *p) {
    char tmp[40];
    switch (t) {
    case GGUF_U8: json_out_int(j, p[0]); break;
    case GGUF_I8: json_out_int(j, (int8_t)p[0]); break;
    case GGUF_U16: json_out_int(j, (int64_t)le(p, 2)); break;
    case GGUF_I16: json_out_int(j, (int16_t)le(p, 2)); break;
    case GGUF_U32: json_out_int(j, (int64_t)le(p, 4)); break;
    case GGUF_I32: json_out_int(j, (int32_t)(uint32_t)le(p, 4)); break;
    case GGUF_U64: {
        uint64_t v = le(p, 8);
        if (v <= INT64_MAX) json_out_int(j, (int64_t)v);
        else json_out_num(j, (double)v);
        break;
    }
    case GGUF_I64: json_out_int(j, (int64_t)le(p, 8)); break;
    case GGUF_BOOL: json_out_bool(j, p[0] != 0); break;
    case GGUF_F32: { /* as its nine significant digits (the float's own decimal form) */
        uint32_t b = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &b, 4);
        snprintf(tmp, sizeof tmp, "%.9g", (double)f);
        json_out_num(j, strtod(tmp, NULL)); /* NaN, inf: null */
        break;
    }
    case GGUF_F64: {
        uint64_t b = le(p, 8);
        double d;
        memcpy(&d, &b, 8);
        json_out_num(j, d);
        break;
    }
    default: json_out_null(j);
    }
}

static void json_value(struct json_out *j, const gguf_kv *kv) {
    if (kv->type == GGUF_STR) {
        json_out_strn(j, (const char *)kv->data, kv->size);
        return;
    }
    if (kv->type != GGUF_ARR) {
        json_scalar(j, kv->type, kv->data);
        return;
    }
    uint64_t show = kv->arr_n < ARR_SHOW ? kv->arr_n : ARR_SHOW;
    json_out_obj_begin(j);
    json_out_key(j, "type"), json_out_str(j, gguf_vtype_name(kv->arr_type));
    json_out_key(j, "count"), json_out_int(j, (int64_t)kv->arr_n);
    json_out_key(j, "first");
    json_out_arr_begin(j);
    const uint8_t *p = kv->data;
    for (uint64_t i = 0; i < show; i++) {
        if (kv->arr_type == GGUF_STR) {
            gguf_str e = gguf_arr_str_next(&p);
            json_out_strn(j, e.ptr, e.len);
        } else {
            json_scalar(j, kv->arr_type, p);
            p += scalar_size(kv->arr_type);
        }
    }
    json_out_arr_end(j);
    json_out_obj_end(j);
}

typedef struct {
    uint64_t count, bytes, elems;
} type_total;

static uint64_t n_elems(const gguf_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

static void print_text(FILE *o, const char *path, const gguf_file *f, const type_total *tt, uint64_t total) {
    fprintf(o, "file: %s\nversion: %u, %" PRIu64 " bytes, alignment %" PRIu64 ", data at %" PRIu64 "\n", path,
            f->version, f->size, f->alignment, f->data_start);
    fprintf(o, "\nmetadata (%" PRIu64 " keys):\n", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        fprintf(o, "  %-44.*s %-4s ", (int)kv->key.len, kv->key.ptr, gguf_vtype_name(kv->type));
        print_value(o, kv);
        fputc('\n', o);
    }
    fprintf(o, "\ntensors (%" PRIu64 "):\n  %-36s %-6s %-22s %14s %14s\n", f->n_tensors, "name", "type", "dims", "offset",
            "bytes");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char dims[96];
        int k = 0;
        for (uint32_t d = 0; d < (t->n_dims ? t->n_dims : 1); d++)
            k += snprintf(dims + k, sizeof dims - (size_t)k, "%s%" PRIu64, d ? " x " : "", t->ne[d]);
        fprintf(o, "  %-36.*s %-6s %-22s %14" PRIu64 " %14" PRIu64 "\n", (int)t->name.len, t->name.ptr,
                ggml_type_name(t->type), dims, t->offset, t->nbytes);
    }
    fprintf(o, "\ntotals per type:\n");
    for (uint32_t ty = 0; ty < GGML_TYPE_COUNT; ty++) {
        if (!tt[ty].count) continue;
        fprintf(o, "  %-6s %5" PRIu64 " tensors %14" PRIu64 " elements %14" PRIu64 " bytes (%.2f bits/weight)\n",
                ggml_type_name(ty), tt[ty].count, tt[ty].elems, tt[ty].bytes,
                tt[ty].elems ? 8.0 * (double)tt[ty].bytes / (double)tt[ty].elems : 0.0);
    }
    fprintf(o, "\nweights: %" PRIu64 " bytes (%.1f MiB, %.2f GiB)\n", total, (double)total / (1 << 20),
            (double)total / (1 << 30));
}

static void print_json(const char *path, const gguf_file *f, const type_total *tt, uint64_t total) {
    struct json_out j;
    out_json_begin(&j);
    json_out_key(&j, "file"), json_out_str(&j, path);
    json_out_key(&j, "version"), json_out_int(&j, f->version);
    json_out_key(&j, "size"), json_out_int(&j, (int64_t)f->size);
    json_out_key(&j, "alignment"), json_out_int(&j, (int64_t)f->alignment);
    json_out_key(&j, "data_start"), json_out_int(&j, (int64_t)f->data_start);
    json_out_key(&j, "metadata");
    json_out_obj_begin(&j);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        json_out_keyn(&j, f->kv[i].key.ptr, f->kv[i].key.len);
        json_value(&j, &f->kv[i]);
    }
    json_out_obj_end(&j);
    json_out_key(&j, "tensors");
    json_out_arr_begin(&j);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        json_out_obj_begin(&j);
        json_out_key(&j, "name"), json_out_strn(&j, t->name.ptr, t->name.len);
        json_out_key(&j, "type"), json_out_str(&j, ggml_type_name(t->type));
        json_out_key(&j, "dims");
        json_out_arr_begin(&j);
        for (uint32_t d = 0; d < (t->n_dims ? t->n_dims : 1); d++) json_out_int(&j, (int64_t)t->ne[d]);
        json_out_arr_end(&j);
        json_out_key(&j, "offset"), json_out_int(&j, (int64_t)t->offset);
        json_out_key(&j, "bytes"), json_out_int(&j, (int64_t)t->nbytes);
        json_out_obj_end(&j);
    }
    json_out_arr_end(&j);
    json_out_key(&j, "totals");
    json_out_obj_begin(&j);
    for (uint32_t ty = 0; ty < GGML_TYPE_COUNT; ty++) {
        if (!tt[ty].count) continue;
        json_out_key(&j, ggml_type_name(ty));
        json_out_obj_begin(&j);
        json_out_key(&j, "tensors"), json_out_int(&j, (int64_t)tt[ty].count);
        json_out_key(&j, "elements"), json_out_int(&j, (int64_t)tt[ty].elems);
        json_out_key(&j, "bytes"), json_out_int(&j, (int64_t)tt[ty].bytes);
        json_out_obj_end(&j);
    }
    json_out_obj_end(&j);
    json_out_key(&j, "weight_bytes"), json_out_int(&j, (int64_t)total);
    out_json_end(&j);
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "inspect: unknown flag %s\n", argv[i]); usage(stderr); return 2; }
        else if (!path) path = argv[i];
        else { fprintf(stderr, "inspect: more than one file given\n"); usage(stderr); return 2; }
    }
    if (!path) { usage(stderr); return 2; }
    gguf_file f;
    char err[512];
    if (gguf_open(path, &f, err, sizeof err)) { fprintf(stderr, "inspect: %s\n", err); return 1; }
    type_total tt[GGML_TYPE_COUNT] = {{0}};
    uint64_t total = 0;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        tt[t->type].count++;
        tt[t->type].bytes += t->nbytes;
        tt[t->type].elems += n_elems(t);
        total += t->nbytes;
    }
    if (json) print_json(path, &f, tt, total);
    else print_text(stdout, path, &f, tt, total);
    int rc = out_finish("inspect");
    /* loadable? what tierkv run would refuse, inspect refuses too */
    if (tkv_model_check(path, err, sizeof err)) { fprintf(stderr, "inspect: %s: %s\n", path, err); rc = 1; }
    gguf_free(&f);
    return rc;
}
