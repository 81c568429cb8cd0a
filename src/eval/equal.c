/* equal.c — N4, Qwen2.5-Math math_equal (grader.py), steps 1-8 ported exactly; step 9 (sympy)
 * replaced by a small LaTeX arithmetic evaluator: both sides must evaluate to finite numbers that
 * agree to rel 1e-4. The evaluator knows numbers, + - * / ^, \frac \dfrac \tfrac, \sqrt and
 * \sqrt[n], \pi, \cdot \times \div, implicit multiplication, () and {}; anything else (a variable,
 * an unknown command) makes it give up, which counts as "not equal" — a small undercount. */
#include "eval/equal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/pystr.h"

/* ---- step 9 stand-in: the evaluator ---- */

struct ev {
    const char *s;
    size_t i;
    int depth, bad;
};

static void ev_ws(struct ev *e) {
    for (;;) {
        const char *p = e->s + e->i;
        if (*p == ' ' || *p == '\t') e->i++;
        else if (!strncmp(p, "\\,", 2) || !strncmp(p, "\\;", 2) || !strncmp(p, "\\!", 2) || !strncmp(p, "\\ ", 2)) e->i += 2;
        else if (!strncmp(p, "\\left", 5)) e->i += 5;
        else if (!strncmp(p, "\\right", 6)) e->i += 6;
        else return;
    }
}

static int ev_cmd(struct ev *e, const char *name) {
    size_t n = strlen(name);
    const char *p = e->s + e->i;
    if (strncmp(p, name, n)) return 0;
    char c = p[n];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 0;
    e->i += n;
    return 1;
}

static double ev_expr(struct ev *e);

/* A braced group, or a single character (\frac12, x^2). */
static double ev_arg(struct ev *e) {
    ev_ws(e);
    char c = e->s[e->i];
    if (c == '{') {
        e->i++;
        double v = ev_expr(e);
        ev_ws(e);
        if (e->s[e->i] != '}') { e->bad = 1; return 0; }
        e->i++;
        return v;
    }
    if (c >= '0' && c <= '9') { e->i++; return c - '0'; }
    e->bad = 1;
    return 0;
}

static double ev_primary(struct ev *e) {
    ev_ws(e);
    const char *p = e->s + e->i;
    if ((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9')) {
        /* only digits and one '.': strtod alone would also take hex, inf and exponents */
        size_t k = 0;
        int dots = 0;
        while ((p[k] >= '0' && p[k] <= '9') || (p[k] == '.' && !dots++)) k++;
        char tmp[64];
        if (k >= sizeof tmp) { e->bad = 1; return 0; }
        memcpy(tmp, p, k);
        tmp[k] = 0;
        double v = strtod(tmp, NULL);
        e->i += k;
        return v;
    }
    if (*p == '(' || *p == '{' || *p == '[') {
        char close = *p == '(' ? ')' : *p == '{' ? '}' : ']';
        e->i++;
        double v = ev_expr(e);
        ev_ws(e);
        if (e->s[e->i] != close) { e->bad = 1; return 0; }
        e->i++;
        return v;
    }
    if (ev_cmd(e, "\\frac") || ev_cmd(e, "\\dfrac") || ev_cmd(e, "\\tfrac")) {
        double a = ev_arg(e), b = ev_arg(e);
        return a / b;
    }
    if (ev_cmd(e, "\\sqrt")) {
        ev_ws(e);
        double root = 2;
        if (e->s[e->i] == '[') {
            e->i++;
            root = ev_expr(e);
            ev_ws(e);
            if (e->s[e->i] != ']') { e->bad = 1; return 0; }
            e->i++;
        }
        double x = ev_arg(e);
        if (root == 3) return cbrt(x);
        return pow(x, 1.0 / root);
    }
    if (ev_cmd(e, "\\pi")) return M_PI;
    e->bad = 1;
    return 0;
}

static double ev_power(struct ev *e) {
    double b = ev_primary(e);
    ev_ws(e);
    if (!e->bad && e->s[e->i] == '^') {
        e->i++;
        ev_ws(e);
        double x;
        if (e->s[e->i] == '{') x = ev_arg(e);
        else if (e->s[e->i] == '-' || e->s[e->i] == '(') {
            if (++e->depth > 100) { e->bad = 1; return 0; }
            x = e->s[e->i] == '-' ? (e->i++, -ev_power(e)) : ev_power(e);
            e->depth--;
        } else x = ev_arg(e);
        return pow(b, x);
    }
    return b;
}

static double ev_unary(struct ev *e) {
    ev_ws(e);
    char c = e->s[e->i];
    if (c == '-' || c == '+') {
        if (++e->depth > 100) { e->bad = 1; return 0; }
        e->i++;
        double v = ev_unary(e);
        e->depth--;
        return c == '-' ? -v : v;
    }
    return ev_power(e);
}

static int starts_primary(struct ev *e) {
    ev_ws(e);
    const char *p = e->s + e->i;
    return (*p >= '0' && *p <= '9') || *p == '(' || *p == '{' || *p == '.' || !strncmp(p, "\\frac", 5) ||
           !strncmp(p, "\\dfrac", 6) || !strncmp(p, "\\tfrac", 6) || !strncmp(p, "\\sqrt", 5) || !strncmp(p, "\\pi", 3);
}

static double ev_term(struct ev *e) {
    double v = ev_unary(e);
    while (!e->bad) {
        ev_ws(e);
        char c = e->s[e->i];
        if (c == '*' || ev_cmd(e, "\\cdot") || ev_cmd(e, "\\times")) {
            if (c == '*') e->i++;
            v *= ev_unary(e);
        } else if (c == '/' || ev_cmd(e, "\\div")) {
            if (c == '/') e->i++;
            v /= ev_unary(e);
        } else if (starts_primary(e)) {
            v *= ev_power(e);
        } else break;
    }
    return v;
}

static double ev_expr(struct ev *e) {
    if (++e->depth > 100) { e->bad = 1; return 0; }
    double v = ev_term(e);
    while (!e->bad) {
        ev_ws(e);
        char c = e->s[e->i];
        if (c != '+' && c != '-') break;
        e->i++;
        double t = ev_term(e);
        v = c == '+' ? v + t : v - t;
    }
    e->depth--;
    return v;
}

int eval_latex_number(const char *s, double *out) {
    struct ev e = {s, 0, 0, 0};
    ev_ws(&e);
    if (!s[e.i]) return 0;
    double v = ev_expr(&e);
    ev_ws(&e);
    if (e.bad || s[e.i] || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* ---- math_equal ---- */

static int isclose(double a, double b) { /* math.isclose(a, b, rel_tol=1e-4) */
    if (a == b) return 1;
    if (isinf(a) || isinf(b)) return 0;
    return fabs(a - b) <= 1e-4 * fmax(fabs(a), fabs(b));
}

static int parse_digits(const char *s, double *out) {
    char *t = ps_replace_take(ps_dup(s), ",", "");
    int ok = ps_parse_float(t, out);
    if (!ok && ps_endswith(t, "%")) {
        size_t n = strlen(t);
        t[--n] = 0;
        if (n && t[n - 1] == '\\') t[--n] = 0;
        if (ps_parse_float(t, out)) { *out /= 100; ok = 1; }
    }
    free(t);
    return ok;
}

char *eval_choice_answer_clean(const char *in) {
    char *p = ps_strip_chars_take(ps_dup(in), "\n", 3);
    p = ps_strip_chars_take(p, ".", 2);
    p = ps_strip_chars_take(p, "/", 2);
    p = ps_strip_chars_take(p, " ", 3);
    p = ps_strip_chars_take(p, ":", 1);
    /* re.findall(r"\b(A|B|C|D|E)\b", pred.upper())[-1] */
    char last = 0;
    uint32_t prev = 0;
    for (size_t i = 0; p[i];) {
        uint32_t c = ps_next(p, &i);
        uint32_t u = c >= 'a' && c <= 'z' ? c - 32 : c;
        if (u >= 'A' && u <= 'E' && !ps_is_word(prev)) {
            size_t j = i;
            uint32_t nx = p[j] ? ps_next(p, &j) : 0;
            if (!nx || !ps_is_word(nx)) last = (char)u;
        }
        prev = c;
    }
    if (last) {
        free(p);
        char o[2] = {last, 0};
        return ps_dup(o);
    }
    p = ps_strip_chars_take(ps_strip_take(p), ".", 3);
    p = ps_strip_chars_take(p, ".", 2);
    return ps_strip_chars_take(p, "/", 2);
}

static int has_format(const char *s, const char *a, const char *b) { return ps_startswith(s, a) && ps_endswith(s, b); }

/* regex.match(r"(\(|\[).+(\)|\])", s): an opening bracket, one or more characters that are not
 * newlines, a closing bracket (so one at index 2 or later; the scan stops at the end of s, which a
 * lone "(" reaches at index 1) */
static int is_list_format(const char *s) {
    if (s[0] != '(' && s[0] != '[') return 0;
    for (size_t i = 1; s[i] && s[i] != '\n'; i++)
        if (i >= 2 && (s[i] == ')' || s[i] == ']')) return 1;
    return 0;
}

static int is_matrix_format(const char *s) {
    return (ps_startswith(s, "\\begin{pmatrix}") || ps_startswith(s, "\\begin{bmatrix}")) &&
           (ps_endswith(s, "\\end{pmatrix}") || ps_endswith(s, "\\end{bmatrix}"));
}

/* str_to_pmatrix: re.findall(r"\{.*,.*\}") finds at most one match, from the first '{' to the last '}' */
static char *str_to_pmatrix(const char *in) {
    char *s = ps_strip_take(ps_dup(in));
    const char *open = strchr(s, '{');
    const char *comma = open ? strchr(open, ',') : NULL;
    const char *close = strrchr(s, '}');
    if (!open || !comma || !close || close < comma || strchr(s, '\n')) { free(s); return ps_dup(""); }
    char *m = ps_strip_chars_take(ps_ndup(open, (size_t)(close + 1 - open)), "{}", 3);
    m = ps_replace_take(m, ",", "\\");
    tkv_buf b = {0};
    tkv_buf_adds(&b, "\\begin{pmatrix}");
    tkv_buf_adds(&b, m);
    tkv_buf_adds(&b, "\\end{pmatrix}");
    free(m);
    free(s);
    return tkv_buf_take(&b);
}

static int math_equal_d(const char *pred, const char *ref, int depth, int *pct);

static int compare_parts(char **pp, size_t np, char **rp, size_t nr, int depth, int *pct) {
    if (np != nr) return 0;
    for (size_t i = 0; i < np; i++) if (!math_equal_d(pp[i], rp[i], depth + 1, pct)) return 0;
    return 1;
}

static int compare_lists(const char *pred, const char *ref, int depth, int *pct) {
    size_t lp = strlen(pred), lr = strlen(ref), np, nr;
    char *ip = ps_ndup(pred + 1, lp >= 2 ? lp - 2 : 0), *ir = ps_ndup(ref + 1, lr >= 2 ? lr - 2 : 0);
    char **pp = ps_split(ip, ",", &np), **rp = ps_split(ir, ",", &nr);
    int r = compare_parts(pp, np, rp, nr, depth, pct);
    ps_free_parts(pp, np);
    ps_free_parts(rp, nr);
    free(ip);
    free(ir);
    return r;
}

/* Rows split on "\\", stripped, empty ones dropped. */
static char **matrix_rows(const char *m, size_t *n) {
    size_t len = strlen(m), a = strlen("\\begin{pmatrix}"), z = strlen("\\end{pmatrix}");
    char *inner = ps_ndup(m + a, len >= a + z ? len - a - z : 0);
    size_t k;
    char **rows = ps_split(inner, "\\\\", &k);
    size_t w = 0;
    for (size_t i = 0; i < k; i++) {
        rows[i] = ps_strip_take(rows[i]);
        if (rows[i][0]) rows[w++] = rows[i];
        else free(rows[i]);
    }
    free(inner);
    *n = w;
    return rows;
}

static int compare_matrices(const char *pred, const char *ref, int depth, int *pct) {
    size_t np, nr;
    char **pr = matrix_rows(pred, &np), **rr = matrix_rows(ref, &nr);
    int r = np == nr;
    for (size_t i = 0; r && i < np; i++) {
        size_t a, b;
        char **pc = ps_split(pr[i], "&", &a), **rc = ps_split(rr[i], "&", &b);
        r = compare_parts(pc, a, rc, b, depth, pct);
        ps_free_parts(pc, a);
        ps_free_parts(rc, b);
    }
    ps_free_parts(pr, np);
    ps_free_parts(rr, nr);
    return r;
}

static int symbolic_equal(const char *a, const char *b) {
    double x, y;
    return eval_latex_number(a, &x) && eval_latex_number(b, &y) && isclose(x, y);
}

static int is_simple_equation(const char *s) {
    if (ps_count(s, "=") != 1) return 0;
    char *l = ps_strip_take(ps_ndup(s, (size_t)(strchr(s, '=') - s)));
    int r = ps_cplen(l) <= 2;
    free(l);
    return r;
}

static int math_equal_d(const char *pred_in, const char *ref_in, int depth, int *pct) {
    if (depth > 32) return 0;
    /* 1. case-insensitive string match after strip */
    char *a = ps_lower_take(ps_strip_take(ps_dup(pred_in))), *b = ps_lower_take(ps_strip_take(ps_dup(ref_in)));
    int eq = !strcmp(a, b);
    free(a);
    free(b);
    if (eq) return 1;
    /* 2. multiple choice */
    if (strlen(ref_in) == 1 && ref_in[0] >= 'A' && ref_in[0] <= 'E') {
        char *c = eval_choice_answer_clean(pred_in);
        eq = !strcmp(c, ref_in);
        free(c);
        if (eq) return 1;
    }
    /* 3. numeric, include_percentage: ref/100, ref, ref*100 */
    double p, r;
    if (parse_digits(pred_in, &p) && parse_digits(ref_in, &r)) {
        if (isclose(r, p)) return 1;
        if (!isclose(r / 100, p) && !isclose(r * 100, p)) return 0;
        if (pct) *pct = 1; /* equal only as a percentage: 50 for 0.5, 0.5 for 50 */
        return 1;
    }
    /* 4. */
    if (!pred_in[0]) return 0;
    char *ref = ps_strip_take(ps_dup(ref_in)), *pred = ps_strip_take(ps_dup(pred_in));
    if (ps_contains(pred, "pmatrix") && !ps_contains(ref, "pmatrix")) {
        char *t = str_to_pmatrix(ref);
        free(ref);
        ref = t;
    }
    /* 5. brackets */
    char *ps_ = ps_dup(pred), *rs = ps_dup(ref);
    if ((has_format(ps_, "[", "]") && !has_format(rs, "(", ")")) || (has_format(ps_, "(", ")") && !has_format(rs, "[", "]"))) {
        ps_ = ps_strip_chars_take(ps_, "[]()", 3);
        rs = ps_strip_chars_take(rs, "[]()", 3);
    }
    static const char *const br[] = {"{", "}", "(", ")"};
    for (int k = 0; k < 4; k++) { ps_ = ps_replace_take(ps_, br[k], ""); rs = ps_replace_take(rs, br[k], ""); }
    eq = !strcmp(ps_lower_take(ps_), ps_lower_take(rs));
    free(ps_);
    free(rs);
    int result = 0;
    if (eq) result = 1;
    else if (is_list_format(pred) && is_list_format(ref)) result = compare_lists(pred, ref, depth, pct); /* 6 */
    else if (is_matrix_format(pred) && is_matrix_format(ref)) result = compare_matrices(pred, ref, depth, pct); /* 7 */
    else if (ps_count(pred, "=") == 1 && ps_count(ref, "=") == 1) { /* 8: l - (r), or its negation */
        tkv_buf x = {0}, y = {0}, z = {0};
        const char *pe = strchr(pred, '='), *re = strchr(ref, '=');
        char *pl = ps_strip_take(ps_ndup(pred, (size_t)(pe - pred))), *pr = ps_strip_take(ps_dup(pe + 1));
        char *rl = ps_strip_take(ps_ndup(ref, (size_t)(re - ref))), *rr = ps_strip_take(ps_dup(re + 1));
        tkv_buf_adds(&x, pl); tkv_buf_adds(&x, " - ("); tkv_buf_adds(&x, pr); tkv_buf_adds(&x, ")");
        tkv_buf_adds(&y, rl); tkv_buf_adds(&y, " - ("); tkv_buf_adds(&y, rr); tkv_buf_adds(&y, ")");
        tkv_buf_adds(&z, "-("); tkv_buf_adds(&z, x.p); tkv_buf_adds(&z, ")");
        result = symbolic_equal(x.p, y.p) || symbolic_equal(z.p, y.p);
        free(tkv_buf_take(&x)); free(tkv_buf_take(&y)); free(tkv_buf_take(&z));
        free(pl); free(pr); free(rl); free(rr);
    } else if (is_simple_equation(pred) && !strchr(ref, '=')) {
        result = math_equal_d(strchr(pred, '=') + 1, ref, depth + 1, pct);
    } else if (is_simple_equation(ref) && !strchr(pred, '=')) {
        result = math_equal_d(pred, strchr(ref, '=') + 1, depth + 1, pct);
    } else result = symbolic_equal(pred, ref); /* 9 */
    free(pred);
    free(ref);
    return result;
}

int eval_math_equal(const char *pred, const char *ref) { return eval_math_equal_how(pred, ref, NULL); }

int eval_math_equal_how(const char *pred, const char *ref, int *via_percent) {
    int pct = 0, r = pred && ref && math_equal_d(pred, ref, 0, &pct);
    if (via_percent) *via_percent = r && pct;
    return r;
}
