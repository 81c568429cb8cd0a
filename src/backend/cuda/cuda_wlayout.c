/* cuda_wlayout.c — host side of the device weight layouts (cuda_wlayout.h): their geometry and the
 * rewrite of file rows into them at prepare time. Pure functions of pointers and sizes; compiled in
 * every build so the tests check the layouts without a GPU. Does not touch the device. */
#include "backend/cuda/cuda_wlayout.h"

#include <string.h>

#include "gguf/gguf.h"

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

size_t cw_layout(uint32_t t, int64_t n_in, int64_t n_out, size_t off[3], int64_t stride[3]) {
    if (!cw_supported(t) || n_in <= 0 || n_out <= 0 || n_in % 32 || n_in % cw_block(t)) return 0;
    int64_t nb = n_in / cw_block(t);
    stride[0] = stride[1] = stride[2] = 0;
    switch (t) {
    case CW_T_F32: stride[0] = 4 * n_in; break;
    case CW_T_F16: case CW_T_BF16: stride[0] = 2 * n_in; break;
    case CW_T_Q8_0: stride[0] = n_in, stride[1] = 4 * nb; break;
    case CW_T_Q4_0: stride[0] = 16 * nb, stride[1] = 4 * nb; break;
    case CW_T_Q5_0: stride[0] = 16 * nb, stride[1] = 8 * nb; break;
    case CW_T_Q4_K: stride[0] = 128 * nb, stride[1] = 16 * nb; break;
    case CW_T_Q6_K: stride[0] = 192 * nb, stride[1] = 16 * nb, stride[2] = 4 * nb; break;
    }
    size_t at = 0;
    for (int k = 0; k < 3; k++) {
        off[k] = at;
        at = align256(at + (size_t)stride[k] * (size_t)n_out);
    }
    return at;
}

void cw_stage_rows(uint32_t t, const uint8_t *file, int64_t n_in, int64_t nr, uint8_t *stage, int64_t i0, int64_t i1) {
    size_t off[3];
    int64_t st[3];
    if (i1 <= i0 || !cw_layout(t, n_in, 1, off, st)) return;
    size_t file_row = (size_t)ggml_row_bytes(t, n_in);
    uint8_t *a = stage, *b = a + (size_t)nr * (size_t)st[0], *c = b + (size_t)nr * (size_t)st[1];
    cw_repack_rows(t, file + (size_t)i0 * file_row, n_in, i1 - i0, a + (size_t)i0 * (size_t)st[0],
                   b + (size_t)i0 * (size_t)st[1], c + (size_t)i0 * (size_t)st[2]);
}

static float f16_at(const uint8_t *p) { return tkv_f16_to_f32(tkv_rd16(p)); }

void cw_repack_rows(uint32_t t, const uint8_t *file, int64_t n_in, int64_t n_rows, uint8_t *a, uint8_t *b, uint8_t *c) {
    size_t off[3];
    int64_t st[3];
    if (!cw_layout(t, n_in, 1, off, st)) return;
    int64_t nb = n_in / cw_block(t);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *ar = a + r * st[0], *br = b ? b + r * st[1] : NULL, *cr = c ? c + r * st[2] : NULL;
        switch (t) {
        case CW_T_F32: case CW_T_F16: case CW_T_BF16:
            memcpy(ar, file, (size_t)st[0]);
            file += st[0];
            break;
        case CW_T_Q8_0:
            for (int64_t k = 0; k < nb; k++, file += 34) {
                float d = f16_at(file);
                memcpy(br + 4 * k, &d, 4);
                memcpy(ar + 32 * k, file + 2, 32);
            }
            break;
        case CW_T_Q4_0:
            for (int64_t k = 0; k < nb; k++, file += 18) {
                float d = f16_at(file);
                memcpy(br + 4 * k, &d, 4);
                memcpy(ar + 16 * k, file + 2, 16);
            }
            break;
        case CW_T_Q5_0:
            for (int64_t k = 0; k < nb; k++, file += 22) {
                float d = f16_at(file);
                memcpy(br + 8 * k, &d, 4);
                memcpy(br + 8 * k + 4, file + 2, 4); /* qh, little-endian as in the file */
                memcpy(ar + 16 * k, file + 6, 16);
            }
            break;
        case CW_T_Q4_K:
            for (int64_t k = 0; k < nb; k++, file += 144) {
                memcpy(br + 16 * k, file, 16);
                memcpy(ar + 128 * k, file + 16, 128);
            }
            break;
        case CW_T_Q6_K:
            for (int64_t k = 0; k < nb; k++, file += 210) {
                float d = f16_at(file + 208);
                memcpy(ar + 192 * k, file, 192);
                memcpy(br + 16 * k, file + 192, 16);
                memcpy(cr + 4 * k, &d, 4);
            }
            break;
        }
    }
}
