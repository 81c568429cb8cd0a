/* extract.c — answer extraction (see extract.h). Ports of hendrycks last_boxed_only_string /
 * remove_boxed, Qwen2.5-Math extract_answer, the lm-eval gsm8k regex filters, and the ARC letter
 * rule chosen in GRADING.md §3. Regexes are written as scanners; each comment gives the regex. */
#include "eval/extract.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "eval/normalize.h"
#include "eval/pystr.h"

char *eval_strip_think(const char *text, int *found) {
    const char *last = NULL;
    for (const char *p = strstr(text, "</think>"); p; p = strstr(p + 1, "</think>")) last = p;
    if (found) *found = last != NULL;
    if (!last) return ps_dup(text);
    const char *p = last + strlen("</think>");
    size_t i = 0;
    while (p[i]) { /* lstrip() */
        size_t j = i;
        if (!ps_is_space(ps_next(p, &j))) break;
        i = j;
    }
    return ps_dup(p + i);
}

static const char *rfind(const char *s, const char *sub) {
    const char *last = NULL;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) last = p;
    return last;
}

char *eval_last_boxed(const char *text) {
    const char *p = rfind(text, "\\boxed");
    if (!p) p = rfind(text, "\\fbox");
    if (!p) return NULL;
    int depth = 0;
    for (const char *q = p; *q; q++) {
        if (*q == '{') depth++;
        if (*q == '}' && --depth == 0) return ps_ndup(p, (size_t)(q + 1 - p));
    }
    return NULL;
}

char *eval_remove_boxed(const char *s) {
    if (!s || !ps_startswith(s, "\\boxed{") || !ps_endswith(s, "}")) return NULL;
    size_t n = strlen(s);
    if (n < 8) return ps_dup(""); /* "\boxed{}" */
    return ps_ndup(s + 7, n - 8);
}

char *eval_boxed_answer(const char *text) {
    char *b = eval_last_boxed(text);
    char *r = eval_remove_boxed(b);
    free(b);
    return r;
}

/* re.findall(r"-?\d*\.?\d+", s)[-1], or NULL */
static char *last_number(const char *s) {
    size_t n = strlen(s), best_s = 0, best_e = 0;
    int any = 0;
    for (size_t p = 0; p < n;) {
        size_t k = p + (s[p] == '-'), a = 0, e = 0;
        while (k + a < n && ps_is_digit((unsigned char)s[k + a])) a++;
        size_t after = k + a;
        if (after < n && s[after] == '.' && after + 1 < n && ps_is_digit((unsigned char)s[after + 1])) {
            size_t b = after + 1;
            while (b < n && ps_is_digit((unsigned char)s[b])) b++;
            e = b;
        } else if (a >= 1) {
            e = after;
        }
        if (e) { best_s = p; best_e = e; any = 1; p = e; }
        else p++;
    }
    return any ? ps_ndup(s + best_s, best_e - best_s) : NULL;
}

/* The brace-balanced content after "boxed{" as Qwen's loop collects it (unbalanced: to the end). */
static char *qwen_braced(const char *a) {
    int stack = 1;
    const char *q = a + 1;
    for (; *q; q++) {
        if (*q == '{') stack++;
        else if (*q == '}' && --stack == 0) break;
    }
    return ps_ndup(a + 1, (size_t)(q - (a + 1)));
}

char *eval_qwen_extract(const char *text) {
    char *s = ps_replace_take(ps_dup(text), "\xD0\xBA\xD0\xB8", ""); /* "ки" */
    char *pred = NULL;
    const char *fa = strstr(s, "final answer is $");
    if (fa && strstr(s, "$. I hope")) {
        const char *t = fa + strlen("final answer is $");
        const char *e = strstr(t, "$. I hope");
        pred = ps_strip_take(e ? ps_ndup(t, (size_t)(e - t)) : ps_dup(t));
    } else if (strstr(s, "boxed")) {
        char *a = ps_after_last(s, "boxed");
        if (!a[0]) { free(s); return a; } /* returns "" before any post-processing */
        if (a[0] == '{') pred = qwen_braced(a);
        else {
            size_t n;
            char **parts = ps_split(a, "$", &n);
            pred = ps_strip_take(ps_dup(parts[0]));
            ps_free_parts(parts, n);
        }
        free(a);
    } else if (strstr(s, "he answer is")) {
        pred = ps_strip_take(ps_after_last(s, "he answer is"));
    } else if (strstr(s, "final answer is")) {
        pred = ps_strip_take(ps_after_last(s, "final answer is"));
    } else if (strstr(s, "\xE7\xAD\x94\xE6\xA1\x88\xE6\x98\xAF")) { /* "答案是": split(..)[1].strip().split("\n\n")[0].strip() */
        size_t n, m;
        char **parts = ps_split(s, "\xE7\xAD\x94\xE6\xA1\x88\xE6\x98\xAF", &n);
        char *t = ps_strip_take(ps_dup(parts[1]));
        char **pp = ps_split(t, "\n\n", &m);
        pred = ps_strip_take(ps_dup(pp[0]));
        ps_free_parts(pp, m);
        ps_free_parts(parts, n);
        free(t);
    } else {
        char *nc = ps_replace_take(ps_dup(s), ",", "");
        pred = last_number(nc);
        if (!pred) pred = ps_dup("");
        free(nc);
    }
    free(s);
    /* re.sub(r"\n\s*", "", pred) */
    tkv_buf b = {0};
    for (size_t i = 0; pred[i];) {
        if (pred[i] == '\n') {
            i++;
            while (pred[i]) {
                size_t j = i;
                if (!ps_is_space(ps_next(pred, &j))) break;
                i = j;
            }
            continue;
        }
        tkv_buf_addc(&b, pred[i++]);
    }
    free(pred);
    pred = tkv_buf_take(&b);
    size_t n = strlen(pred);
    if (n && pred[0] == ':') { memmove(pred, pred + 1, n); n--; }
    if (n && pred[n - 1] == '.') pred[--n] = 0;
    if (n && pred[n - 1] == '/') pred[--n] = 0;
    char *r = eval_qwen_strip(pred, 0);
    free(pred);
    return r;
}

static int in_class(char c, const char *set) { return c && strchr(set, c) != NULL; }

char *eval_gsm8k_strict(const char *text) {
    for (const char *p = strstr(text, "#### "); p; p = strstr(p + 1, "#### ")) {
        const char *q = p + 5, *r = q + (*q == '-');
        const char *e = r;
        while (in_class(*e, "0123456789.,")) e++;
        if (e > r) return ps_strip_take(ps_ndup(q, (size_t)(e - q)));
    }
    return ps_dup("[invalid]");
}

char *eval_gsm8k_flexible(const char *text) {
    size_t n = strlen(text), bs = 0, be = 0;
    int any = 0;
    for (size_t p = 0; p < n;) {
        size_t k = p + (text[p] == '-'), run = 0, dig = 0, e = 0;
        while (k + run < n && in_class(text[k + run], "$0123456789.,")) run++;
        while (k + dig < n && ps_is_digit((unsigned char)text[k + dig])) dig++;
        if (run >= 2) e = k + run;     /* (-?[$0-9.,]{2,}) */
        else if (dig >= 1) e = k + dig; /* (-?[0-9]+) */
        if (e) { bs = p; be = e; any = 1; p = e; }
        else p++;
    }
    return any ? ps_strip_take(ps_ndup(text + bs, be - bs)) : ps_dup("[invalid]");
}

char *eval_gsm8k_norm(const char *in) {
    char *s = ps_replace_take(ps_dup(in), ",", "");
    s = ps_replace_take(s, "$", "");
    const char *last = rfind(s, "#### "); /* (?s).*#### : greedy, up to the last one */
    if (last) {
        char *t = ps_dup(last + 5);
        free(s);
        s = t;
    }
    size_t n = strlen(s); /* \.$ : a final '.', or one just before a final '\n' */
    if (n && s[n - 1] == '.') s[n - 1] = 0;
    else if (n >= 2 && s[n - 1] == '\n' && s[n - 2] == '.') memmove(s + n - 2, s + n - 1, 2);
    return ps_lower_take(s);
}

/* ---- ARC ---- */

static int letter_ok(uint32_t c, int n_choices) { return c >= 'A' && c < (uint32_t)('A' + n_choices); }

/* The last standalone letter \b[A-E]\b (case-sensitive) in s, or 0. */
static char last_letter(const char *s, int n_choices) {
    char found = 0;
    uint32_t prev = 0;
    for (size_t i = 0; s[i];) {
        uint32_t c = ps_next(s, &i);
        if (letter_ok(c, n_choices) && !ps_is_word(prev)) {
            size_t j = i;
            uint32_t next = s[j] ? ps_next(s, &j) : 0;
            if (!next || !ps_is_word(next)) found = (char)c;
        }
        prev = c;
    }
    return found;
}

char *eval_arc_extract(const char *text, int n_choices) {
    if (n_choices <= 0 || n_choices > 26) n_choices = 5;
    char letter = 0;
    char *box = eval_boxed_answer(text);
    if (box) { /* \boxed{B}, \boxed{\text{B}}, \boxed{(B)}, \boxed{B. text} */
        static const char *const wrap[] = {"\\textbf{", "\\text{", "\\mathrm{", "\\mathbf{", "{", "}", "(", ")", "$", "*"};
        char *c = box; /* c takes ownership */
        box = NULL;
        for (size_t k = 0; k < sizeof wrap / sizeof wrap[0]; k++) c = ps_replace_take(c, wrap[k], "");
        c = ps_strip_take(c);
        size_t i = 0;
        uint32_t first = c[0] ? ps_next(c, &i) : 0;
        if (first >= 'a' && first <= 'z') first -= 32;
        if (letter_ok(first, n_choices) && (!c[i] || !ps_is_word((unsigned char)c[i]))) letter = (char)first;
        free(c);
    }
    if (!letter) { /* simple-evals: normalize_response, then (?i)Answer[ \t]*:[ \t]*\$?([A-D])\$? */
        static const char *const del[] = {"**", "$\\boxed{", "}$", "\\$", "$\\text{", "$", "\\mathrm{",
                                          "\\{", "\\text", "\\(", "\\mathbf{", "{", "\\boxed"};
        char *t = ps_dup(text);
        for (size_t k = 0; k < sizeof del / sizeof del[0]; k++) t = ps_replace_take(t, del[k], "");
        for (const char *p = t; *p && !letter; p++) {
            if (strncasecmp(p, "answer", 6)) continue;
            const char *q = p + 6;
            while (*q == ' ' || *q == '\t') q++;
            if (*q != ':') continue;
            q++;
            while (*q == ' ' || *q == '\t') q++;
            if (*q == '$') q++;
            uint32_t c = (unsigned char)*q;
            if (c >= 'a' && c <= 'z') c -= 32;
            if (letter_ok(c, n_choices)) letter = (char)c;
        }
        free(t);
    }
    if (!letter) letter = last_letter(text, n_choices);
    free(box);
    if (!letter) return NULL;
    char out[2] = {letter, 0};
    return ps_dup(out);
}
