/* test_peak.c — the int8 peak loops (backend/cpu/peak.h) compute what they count: after n rounds
 * every chain holds n times its products, so the sum the loop returns is known exactly; and the
 * driver reports a positive peak for each ISA this CPU has, 0 for the generic kernels. */
#include <string.h>

#include "backend/cpu/peak.h"
#include "t.h"
#include "tierkv.h"

TEST(int8_peak_loops_count_their_products) {
    cpu_isa best = cpu_detect_isa();
    int32_t sink = 0;
    if (best >= CPU_ISA_AVX2) {
        /* maddubs(a_k, b) with a_k = k+1 (unsigned), b = -5: 4 (k+1)(-5) per i32 lane, k = 0..7 */
        CHECK(cpu_i8_loop_avx2(1000, &sink) == 1000 * 8 * 32);
        CHECK(sink == 1000 * 4 * -5 * 36);
    }
    if (best >= CPU_ISA_AVX512) {
        /* six chains u8 (k+1) x s8 -5, six with the roles swapped: u8 251 x s8 (k+1), k = 0..5 */
        sink = 0;
        CHECK(cpu_i8_loop_avx512(1000, &sink) == 1000 * 12 * 32);
        CHECK(sink == 1000 * 4 * 21 * (251 - 5));
    }
    if (best < CPU_ISA_AVX2) SKIP("no AVX2 on this CPU");
}

TEST(int8_peak_driver) {
    double ops = -1;
    const char *isa = NULL;
    char err[256];
    REQUIRE(tkv_cpu_int8_peak("generic", 1, 0.05, &ops, &isa, err, sizeof err) == 0);
    CHECK(ops == 0 && isa && !strcmp(isa, "generic"));
    REQUIRE(tkv_cpu_int8_peak("auto", 2, 0.05, &ops, &isa, err, sizeof err) == 0);
    CHECK(cpu_detect_isa() == CPU_ISA_GENERIC ? ops == 0 : ops > 1e9);
    CHECK(tkv_cpu_int8_peak("avx9", 1, 0.05, &ops, &isa, err, sizeof err) != 0 && strstr(err, "avx9"));
    CHECK(tkv_cpu_int8_peak("auto", 0, 0.05, &ops, &isa, err, sizeof err) != 0);
}
