/* normalize.c — answer normalisers N1 (hendrycks _strip_string / is_equiv), the prm800k
 * normalize_answer wrapper around it, and N3 (Qwen2.5-Math strip_string, including its
 * word2number step and its MathQA unit list). Each is a line-by-line port of the Python in
 * GRADING.md section 2; comments name the Python step they reproduce. Where Python would raise
 * (N1 only), the function reports it so is_equiv can fall back to comparing the raw strings. */
#include "eval/normalize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "eval/pystr.h"

/* Qwen2.5-Math parser.py unit_texts, in list order; the full list is these followed by each
 * with "s" appended (264 entries). Entries are regex source: '.' matches any character. */
static const char *const unit_base[] = {
    "east", "degree", "mph", "kmph", "ft", "m sqaure", " m east", "sq m", "deg", "mile", "q .",
    "monkey", "prime", "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm",
    "lt", "gain", "ab", "way", "west", "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t",
    "a", "h", "no change", "men", "soldier", "pie", "bc", "excess", "st", "inches", "noon",
    "percent", "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th", "π r 2", "sq", "mark", "l",
    "toy", "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women", "feet", "am", "pm",
    "hr", "cu cm", "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm",
    "number", "kmph", "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt",
    "sq inch", "mp", "∏ cm ³", "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs",
    "kg", "g", "month", "km", "m", "cm", "mm", "apple", "liter", "loss", "yard", "pure", "year",
    "increase", "decrease", "d", "less", "Surface", "litre", "pi sq m", "s .", "metre", "meter",
    "inch",
};
#define N_UNIT_BASE (sizeof unit_base / sizeof unit_base[0])

size_t eval_qwen_unit_count(void) { return 2 * N_UNIT_BASE; }
/* Called 2 x 528 times per N3 call: a copy, not a snprintf (which took 3/4 of the grader's time). */
const char *eval_qwen_unit(size_t i, char *buf, size_t cap) {
    TKV_ASSERT(i < 2 * N_UNIT_BASE && cap > 0);
    const char *base = unit_base[i % N_UNIT_BASE];
    size_t n = strlen(base), plural = i >= N_UNIT_BASE;
    if (n + plural >= cap) n = cap - 1 - plural;
    memcpy(buf, base, n);
    if (plural) buf[n++] = 's';
    buf[n] = 0;
    return buf;
}

/* ---- shared pieces of _strip_string ---- */

/* _fix_fracs. hendrycks indexes substr[0] unguarded (raises on an empty part: *exc = 1);
 * Qwen checks the length first. Fewer than two characters after "\frac" returns s unchanged. */
static char *fix_fracs_take(char *s, int qwen, int *exc) {
    size_t n;
    char **parts = ps_split(s, "\\frac", &n);
    if (n == 1) { ps_free_parts(parts, n); return s; }
    tkv_buf b = {0};
    tkv_buf_adds(&b, parts[0]);
    for (size_t k = 1; k < n; k++) {
        const char *sub = parts[k];
        tkv_buf_adds(&b, "\\frac");
        if (!sub[0] && !qwen) { *exc = 1; goto keep; }
        if (sub[0] == '{') { tkv_buf_adds(&b, sub); continue; }
        size_t i = 0, ia, ib;
        if (!sub[0]) goto keep;
        ps_next(sub, &i);
        ia = i;
        if (!sub[i]) goto keep; /* fewer than 2 characters: return the original string */
        ps_next(sub, &i);
        ib = i;
        tkv_buf_addc(&b, '{');
        tkv_buf_add(&b, sub, ia);
        tkv_buf_addc(&b, '}');
        if (!(ib - ia == 1 && sub[ia] == '{')) {
            tkv_buf_addc(&b, '{');
            tkv_buf_add(&b, sub + ia, ib - ia);
            tkv_buf_addc(&b, '}');
        } else {
            tkv_buf_addc(&b, '{');
        }
        tkv_buf_adds(&b, sub + ib);
    }
    ps_free_parts(parts, n);
    free(s);
    return tkv_buf_take(&b);
keep:
    ps_free_parts(parts, n);
    free(tkv_buf_take(&b));
    return s;
}

/* _fix_a_slash_b: "a/b" with both sides str(int) -> \frac{a}{b}; Qwen also lets a side that
 * contains "sqrt" through unchanged. */
static char *fix_a_slash_b_take(char *s, int qwen) {
    size_t n;
    char **parts = ps_split(s, "/", &n);
    if (n == 2) {
        int ok_a = (qwen && ps_contains(parts[0], "sqrt")) || ps_is_canonical_int(parts[0]);
        int ok_b = (qwen && ps_contains(parts[1], "sqrt")) || ps_is_canonical_int(parts[1]);
        if (ok_a && ok_b) {
            tkv_buf b = {0};
            tkv_buf_adds(&b, "\\frac{");
            tkv_buf_adds(&b, parts[0]);
            tkv_buf_adds(&b, "}{");
            tkv_buf_adds(&b, parts[1]);
            tkv_buf_adds(&b, "}");
            ps_free_parts(parts, n);
            free(s);
            return tkv_buf_take(&b);
        }
    }
    ps_free_parts(parts, n);
    return s;
}

/* ".5" -> "0.5": a string that starts with a point gets a 0 before it. */
static char *lead_zero_take(char *s) {
    if (s[0] != '.') return s;
    char *t = tkv_xmalloc(strlen(s) + 2);
    t[0] = '0';
    strcpy(t + 1, s);
    free(s);
    return t;
}

/* "k = 5" -> " 5": exactly one '=' and a left side of at most 2 characters. */
static char *eq_rule_take(char *s) {
    size_t n;
    char **parts = ps_split(s, "=", &n);
    if (n == 2 && ps_cplen(parts[0]) <= 2) {
        char *r = ps_dup(parts[1]);
        ps_free_parts(parts, n);
        free(s);
        return r;
    }
    ps_free_parts(parts, n);
    return s;
}

/* ---- N1 ---- */

char *eval_hendrycks_strip(const char *in) {
    char *s = ps_dup(in);
    int exc = 0;
    s = ps_replace_take(s, "\n", "");
    s = ps_replace_take(s, "\\!", "");
    s = ps_replace_take(s, "\\\\", "\\");
    s = ps_replace_take(s, "tfrac", "frac");
    s = ps_replace_take(s, "dfrac", "frac");
    s = ps_replace_take(s, "\\left", "");
    s = ps_replace_take(s, "\\right", "");
    s = ps_replace_take(s, "^{\\circ}", "");
    s = ps_replace_take(s, "^\\circ", "");
    s = ps_replace_take(s, "\\$", "");
    if (ps_contains(s, "\\text{ ")) { /* _remove_right_units */
        size_t n;
        char **parts = ps_split(s, "\\text{ ", &n);
        if (n != 2) { ps_free_parts(parts, n); free(s); return NULL; }
        free(s);
        s = ps_dup(parts[0]);
        ps_free_parts(parts, n);
    }
    s = ps_replace_take(s, "\\%", "");
    s = ps_replace_take(s, " .", " 0.");
    s = ps_replace_take(s, "{.", "{0.");
    if (!s[0]) return s;
    s = lead_zero_take(s);
    s = eq_rule_take(s);
    if (ps_contains(s, "\\sqrt")) { /* _fix_sqrt: one character after \sqrt gets braces */
        size_t n;
        char **parts = ps_split(s, "\\sqrt", &n);
        tkv_buf b = {0};
        tkv_buf_adds(&b, parts[0]);
        for (size_t k = 1; k < n && !exc; k++) {
            const char *sp = parts[k];
            if (!sp[0]) { exc = 1; break; }
            if (sp[0] == '{') { tkv_buf_adds(&b, "\\sqrt"); tkv_buf_adds(&b, sp); continue; }
            size_t i = 0;
            ps_next(sp, &i);
            tkv_buf_adds(&b, "\\sqrt{");
            tkv_buf_add(&b, sp, i);
            tkv_buf_addc(&b, '}');
            tkv_buf_adds(&b, sp + i);
        }
        ps_free_parts(parts, n);
        char *t = tkv_buf_take(&b);
        if (exc) { free(t); free(s); return NULL; }
        free(s);
        s = t;
    }
    s = ps_replace_take(s, " ", "");
    s = fix_fracs_take(s, 0, &exc);
    if (exc) { free(s); return NULL; }
    if (!strcmp(s, "0.5")) { free(s); s = ps_dup("\\frac{1}{2}"); }
    return fix_a_slash_b_take(s, 0);
}

int eval_hendrycks_is_equiv(const char *a, const char *b) {
    if (!a || !b) return !a && !b;
    char *sa = eval_hendrycks_strip(a), *sb_ = eval_hendrycks_strip(b);
    int r = sa && sb_ ? strcmp(sa, sb_) == 0 : strcmp(a, b) == 0;
    free(sa);
    free(sb_);
    return r;
}

char *eval_prm800k_normalize(const char *in) {
    char *s = ps_strip_take(ps_dup(in));
    size_t n = strlen(s);
    /* re.search("^\\\\text\{(?P<text>.+?)\}$"): the whole string, at least one char inside, no newline */
    if (n >= 8 && ps_startswith(s, "\\text{") && s[n - 1] == '}' && !memchr(s + 6, '\n', n - 7)) {
        char *t = ps_strip_take(ps_ndup(s + 6, n - 7));
        free(s);
        s = t;
    }
    char *r = eval_hendrycks_strip(s);
    if (!r) return s;
    free(s);
    return r;
}

/* ---- word2number (akshaynagpal/w2n word_to_num) ---- */

static const struct { const char *w; long long v; } w2n_words[] = {
    {"zero", 0}, {"one", 1}, {"two", 2}, {"three", 3}, {"four", 4}, {"five", 5}, {"six", 6}, {"seven", 7},
    {"eight", 8}, {"nine", 9}, {"ten", 10}, {"eleven", 11}, {"twelve", 12}, {"thirteen", 13},
    {"fourteen", 14}, {"fifteen", 15}, {"sixteen", 16}, {"seventeen", 17}, {"eighteen", 18},
    {"nineteen", 19}, {"twenty", 20}, {"thirty", 30}, {"forty", 40}, {"fifty", 50}, {"sixty", 60},
    {"seventy", 70}, {"eighty", 80}, {"ninety", 90}, {"hundred", 100}, {"thousand", 1000},
    {"million", 1000000}, {"billion", 1000000000}, {"point", -1},
};
#define W2N_N (int)(sizeof w2n_words / sizeof w2n_words[0])

static int w2n_lookup(const char *w, size_t n) {
    for (int k = 0; k < W2N_N; k++)
        if (strlen(w2n_words[k].w) == n && !memcmp(w2n_words[k].w, w, n)) return k;
    return -1;
}

/* number_formation; returns 0 where Python raises (an empty list). */
static int w2n_form(const int *ix, int n, long long *out) {
    if (n <= 0) return 0;
    long long v[4];
    for (int k = 0; k < n && k < 4; k++) v[k] = w2n_words[ix[k]].v;
    if (n == 4) *out = v[0] * v[1] + v[2] + v[3];
    else if (n == 3) *out = v[0] * v[1] + v[2];
    else if (n == 2) *out = (v[0] == 100 || v[1] == 100) ? v[0] * v[1] : v[0] + v[1];
    else *out = v[0];
    return 1;
}

static int w2n_index(const int *ix, int n, const char *w) {
    for (int k = 0; k < n; k++) if (!strcmp(w2n_words[ix[k]].w, w)) return k;
    return -1;
}
static int w2n_count(const int *ix, int n, const char *w) {
    int c = 0;
    for (int k = 0; k < n; k++) c += !strcmp(w2n_words[ix[k]].w, w);
    return c;
}

/* Returns 1 and the text of str(word_to_num(s)) in out, or 0 where w2n raises. */
static int w2n(const char *in, tkv_buf *out) {
    char *s = ps_lower_take(ps_replace_take(ps_dup(in), "-", " "));
    int all_digits = s[0] != 0;
    for (const char *p = s; *p; p++) if (*p < '0' || *p > '9') all_digits = 0;
    if (all_digits) { /* return int(number_sentence) */
        const char *p = s;
        while (p[0] == '0' && p[1]) p++;
        tkv_buf_adds(out, p);
        free(s);
        return 1;
    }
    /* split() on whitespace, keep the words in the table */
    size_t len = strlen(s);
    int *clean = tkv_xmalloc((len / 2 + 2) * sizeof *clean), nc = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        if (ps_is_space(ps_next(s, &j))) { i = j; continue; }
        size_t start = i;
        while (i < len) {
            j = i;
            if (ps_is_space(ps_next(s, &j))) break;
            i = j;
        }
        int k = w2n_lookup(s + start, i - start);
        if (k >= 0) clean[nc++] = k;
    }
    free(s);
    int ok = 0;
    if (nc == 0) goto done;
    if (w2n_count(clean, nc, "thousand") > 1 || w2n_count(clean, nc, "million") > 1 ||
        w2n_count(clean, nc, "billion") > 1 || w2n_count(clean, nc, "point") > 1)
        goto done;
    int *dec = NULL, nd = 0;
    int pi = w2n_index(clean, nc, "point");
    if (pi >= 0) { dec = clean + pi + 1; nd = nc - pi - 1; nc = pi; }
    int bi = w2n_index(clean, nc, "billion"), mi = w2n_index(clean, nc, "million"), ti = w2n_index(clean, nc, "thousand");
    if ((ti > -1 && (ti < mi || ti < bi)) || (mi > -1 && mi < bi)) goto done;
    long long total = 0, m;
    if (nc == 1) total += w2n_words[clean[0]].v;
    else if (nc > 1) {
        if (bi > -1) { if (!w2n_form(clean, bi, &m)) goto done; total += m * 1000000000LL; }
        if (mi > -1) {
            if (bi > -1) { if (!w2n_form(clean + bi + 1, mi - bi - 1, &m)) goto done; }
            else if (!w2n_form(clean, mi, &m)) goto done;
            total += m * 1000000;
        }
        if (ti > -1) {
            if (mi > -1) { if (!w2n_form(clean + mi + 1, ti - mi - 1, &m)) goto done; }
            else if (bi > -1) { if (!w2n_form(clean + bi + 1, ti - bi - 1, &m)) goto done; }
            else if (!w2n_form(clean, ti, &m)) goto done;
            total += m * 1000;
        }
        long long hundreds = 0;
        if (ti > -1 && ti != nc - 1) { if (!w2n_form(clean + ti + 1, nc - ti - 1, &hundreds)) goto done; }
        else if (mi > -1 && mi != nc - 1 && ti != nc - 1) { if (!w2n_form(clean + mi + 1, nc - mi - 1, &hundreds)) goto done; }
        else if (bi > -1 && bi != nc - 1) { if (!w2n_form(clean + bi + 1, nc - bi - 1, &hundreds)) goto done; }
        else if (ti == -1 && mi == -1 && bi == -1) { if (!w2n_form(clean, nc, &hundreds)) goto done; }
        total += hundreds;
    }
    int is_float = 0;
    char buf[64];
    if (nd > 0) { /* get_decimal_sum: all digit words -> float("0.ddd"), else the int 0 */
        int all = 1;
        tkv_buf d = {0};
        tkv_buf_adds(&d, "0.");
        for (int k = 0; k < nd; k++) {
            long long v = w2n_words[dec[k]].v;
            if (v < 0 || v > 9 || (v == 0 && strcmp(w2n_words[dec[k]].w, "zero"))) { all = 0; break; }
            tkv_buf_addc(&d, (char)('0' + v));
        }
        char *ds = tkv_buf_take(&d);
        if (all) {
            ps_float_repr((double)total + strtod(ds, NULL), buf, sizeof buf);
            is_float = 1;
        }
        free(ds);
    }
    if (!is_float) snprintf(buf, sizeof buf, "%lld", total);
    tkv_buf_adds(out, buf);
    ok = 1;
done:
    free(clean);
    return ok;
}

char *eval_w2n_convert(const char *s) {
    tkv_buf b = {0};
    if (w2n(s, &b)) return tkv_buf_take(&b);
    free(tkv_buf_take(&b));
    return ps_dup(s);
}

/* ---- the regexes N3 uses, each as a small scanner ---- */

/* Does the unit pattern (literal, '.' = any char but \n) match the code points at cps[i..]? */
static int unit_match_at(const uint32_t *cps, size_t n, size_t i, const uint32_t *pat, size_t m) {
    if (n - i < m) return 0;
    for (size_t k = 0; k < m; k++) {
        if (pat[k] == '.') { if (cps[i + k] == '\n') return 0; }
        else if (pat[k] != cps[i + k]) return 0;
    }
    return 1;
}

static uint32_t *decode_all(const char *s, size_t *n, size_t **offs) {
    size_t len = strlen(s), k = 0;
    uint32_t *cps = tkv_xmalloc((len + 1) * sizeof *cps);
    size_t *o = tkv_xmalloc((len + 2) * sizeof *o);
    for (size_t i = 0; s[i];) { o[k] = i; cps[k++] = ps_next(s, &i); }
    o[k] = len;
    *n = k;
    *offs = o;
    return cps;
}

/* re.sub(r"(^|\W)" + unit + r"($|\W)", r"\1\2", s); NULL when nothing matched */
static char *unit_sub(const char *s, const char *unit) {
    /* Fast exit: the literal text before the first '.' must occur somewhere. */
    char lit[64];
    size_t ll = strcspn(unit, ".");
    if (ll >= sizeof lit) ll = sizeof lit - 1;
    memcpy(lit, unit, ll);
    lit[ll] = 0;
    if (ll && !strstr(s, lit)) return NULL;
    size_t n, m, *offs, *uoffs;
    uint32_t *cps = decode_all(s, &n, &offs);
    uint32_t *pat = decode_all(unit, &m, &uoffs);
    tkv_buf b = {0};
    size_t i = 0;
    int changed = 0;
    while (i < n) {
        size_t end = 0, pre = 0, suf = 0;
        int hit = 0;
        /* alternative ^ (only at 0), then \W; suffix $ first, then \W */
        for (int alt = 0; alt < 2 && !hit; alt++) {
            size_t st;
            if (alt == 0) { if (i != 0) continue; st = 0; pre = 0; }
            else { if (ps_is_word(cps[i])) continue; st = i + 1; pre = 1; }
            if (!unit_match_at(cps, n, st, pat, m)) continue;
            size_t ue = st + m;
            if (ue == n) { hit = 1; end = n; suf = 0; }
            else if (!ps_is_word(cps[ue])) { hit = 1; end = ue + 1; suf = 1; }
        }
        if (hit) {
            if (pre) tkv_buf_add(&b, s + offs[i], offs[i + 1] - offs[i]);
            if (suf) tkv_buf_add(&b, s + offs[end - 1], offs[end] - offs[end - 1]);
            i = end;
            changed = 1;
        } else {
            tkv_buf_add(&b, s + offs[i], offs[i + 1] - offs[i]);
            i++;
        }
    }
    free(cps); free(offs); free(pat); free(uoffs);
    char *r = tkv_buf_take(&b);
    if (!changed) { free(r); return NULL; }
    return r;
}

/* re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s) */
static char *sub_begin_array_take(char *s) {
    const char *key = "\\begin{array}{";
    if (!strstr(s, key)) return s;
    tkv_buf b = {0};
    const char *q = s, *p;
    while ((p = strstr(q, key))) {
        const char *close = p + strlen(key);
        while (*close && *close != '}' && *close != '\n') close++;
        if (*close != '}') { tkv_buf_add(&b, q, (size_t)(p + 1 - q)); q = p + 1; continue; }
        tkv_buf_add(&b, q, (size_t)(p - q));
        tkv_buf_adds(&b, "\\begin{pmatrix}");
        q = close + 1;
    }
    tkv_buf_adds(&b, q);
    free(s);
    return tkv_buf_take(&b);
}

/* re.sub(r"\\KEY\{(.*?)\}", keep ? r"\1" : "", s) for KEY = text / mbox */
static char *sub_braced_take(char *s, const char *key, int keep) {
    if (!strstr(s, key)) return s;
    tkv_buf b = {0};
    const char *q = s, *p;
    size_t kl = strlen(key);
    while ((p = strstr(q, key))) {
        const char *close = p + kl;
        while (*close && *close != '}' && *close != '\n') close++;
        if (*close != '}') { tkv_buf_add(&b, q, (size_t)(p + 1 - q)); q = p + 1; continue; }
        tkv_buf_add(&b, q, (size_t)(p - q));
        if (keep) tkv_buf_add(&b, p + kl, (size_t)(close - (p + kl)));
        q = close + 1;
    }
    tkv_buf_adds(&b, q);
    free(s);
    return tkv_buf_take(&b);
}

/* re.sub(r"(\d+)\.0*([^\d])", r"\1\2", s) then re.sub(r"(\d+)\.0*$", r"\1", s) */
static char *sub_trailing_zeros_take(char *s) {
    tkv_buf b = {0};
    size_t n = strlen(s), i = 0;
    while (i < n) {
        if (ps_is_digit((unsigned char)s[i])) {
            size_t q = i;
            while (q < n && ps_is_digit((unsigned char)s[q])) q++;
            if (q < n && s[q] == '.') {
                size_t r = q + 1;
                while (r < n && s[r] == '0') r++;
                if (r < n && !ps_is_digit((unsigned char)s[r])) {
                    tkv_buf_add(&b, s + i, q - i);
                    size_t e = r;
                    ps_next(s, &e);
                    tkv_buf_add(&b, s + r, e - r);
                    i = e;
                    continue;
                }
            }
            tkv_buf_add(&b, s + i, q - i); /* every start inside this run fails the same way */
            i = q;
            continue;
        }
        tkv_buf_addc(&b, s[i]);
        i++;
    }
    free(s);
    s = tkv_buf_take(&b);
    n = strlen(s);
    size_t e = n;
    while (e > 0 && s[e - 1] == '0') e--;
    if (e > 1 && s[e - 1] == '.' && ps_is_digit((unsigned char)s[e - 2])) s[e - 1] = 0;
    return s;
}

/* re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s) */
static char *sub_sqrt_take(char *s) {
    if (!strstr(s, "\\sqrt")) return s;
    tkv_buf b = {0};
    const char *q = s, *p;
    while ((p = strstr(q, "\\sqrt"))) {
        size_t i = (size_t)(p - s) + 5, j = i;
        while (s[j]) {
            size_t k = j;
            if (!ps_is_word(ps_next(s, &k))) break;
            j = k;
        }
        tkv_buf_add(&b, q, (size_t)(p - q) + 5);
        if (j > i) {
            tkv_buf_addc(&b, '{');
            tkv_buf_add(&b, s + i, j - i);
            tkv_buf_addc(&b, '}');
        }
        q = s + j;
    }
    tkv_buf_adds(&b, q);
    free(s);
    return tkv_buf_take(&b);
}

/* ---- N3 ---- */

char *eval_qwen_strip(const char *in, int skip_unit) {
    char *s = ps_strip_take(ps_dup(in));
    s = ps_replace_take(s, "\n", "");
    s = ps_strip_chars_take(s, ".", 2);
    s = ps_replace_take(s, "\\!", "");
    s = sub_begin_array_take(s);
    s = ps_replace_take(s, "\\end{array}", "\\end{pmatrix}");
    s = ps_replace_take(s, "bmatrix", "pmatrix");
    s = ps_replace_take(s, "tfrac", "frac");
    s = ps_replace_take(s, "dfrac", "frac");
    s = ps_replace_take(s, "\\neq", "\\ne");
    s = ps_replace_take(s, "\\leq", "\\le");
    s = ps_replace_take(s, "\\geq", "\\ge");
    s = ps_replace_take(s, "\\left", "");
    s = ps_replace_take(s, "\\right", "");
    s = ps_replace_take(s, "\\{", "{");
    s = ps_replace_take(s, "\\}", "}");
    { /* _string = re.sub(r"\\text{.*?}$", "", s).strip(); keep if non-empty and different */
        char *t = ps_dup(s);
        const char *p = strstr(t, "\\text{");
        size_t n = strlen(t);
        if (p && n > 0 && t[n - 1] == '}' && (size_t)(p - t) + 6 <= n - 1 && !strchr(p, '\n')) t[p - t] = 0;
        t = ps_strip_take(t);
        if (t[0] && strcmp(t, s)) { free(s); s = t; } else free(t);
    }
    if (!skip_unit) {
        char unit[64];
        for (int pass = 0; pass < 2; pass++) {
            for (size_t k = 0; k < eval_qwen_unit_count(); k++) {
                char *t = unit_sub(s, eval_qwen_unit(k, unit, sizeof unit));
                if (t && t[0]) { free(s); s = t; } else free(t);
            }
        }
    }
    s = ps_replace_take(s, "^{\\circ}", "");
    s = ps_replace_take(s, "^\\circ", "");
    s = ps_replace_take(s, "\\$", "");
    s = ps_replace_take(s, "$", "");
    s = ps_replace_take(s, "\\(", "");
    s = ps_replace_take(s, "\\)", "");
    { char *t = eval_w2n_convert(s); free(s); s = t; }
    s = sub_braced_take(s, "\\text{", 1);
    static const char *const vars[] = {"x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to"};
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) s = ps_replace_take(s, vars[k], "");
    s = ps_replace_take(s, "\\emptyset", "{}");
    s = ps_replace_take(s, "(-\\infty,\\infty)", "\\mathbb{R}");
    s = ps_replace_take(s, "\\%", "");
    s = ps_replace_take(s, "%", "");
    s = ps_replace_take(s, " .", " 0.");
    s = ps_replace_take(s, "{.", "{0.");
    /* the isalnum() bracket unwrap cannot fire: a string starting with a bracket is not alnum */
    s = ps_replace_take(s, "infinity", "\\infty");
    if (!ps_contains(s, "\\infty")) s = ps_replace_take(s, "inf", "\\infty");
    s = ps_replace_take(s, "+\\inity", "\\infty");
    s = ps_replace_take(s, "and", "");
    s = ps_replace_take(s, "\\mathbf", "");
    s = sub_braced_take(s, "\\mbox{", 0);
    if (strchr(s, 'j') && !strchr(s, 'i')) s = ps_replace_take(s, "j", "i");
    s = sub_trailing_zeros_take(s);
    if (!s[0]) return s;
    s = lead_zero_take(s);
    s = eq_rule_take(s);
    s = sub_sqrt_take(s);
    s = ps_replace_take(s, " ", "");
    int exc = 0;
    s = fix_fracs_take(s, 1, &exc);
    return fix_a_slash_b_take(s, 1);
}
