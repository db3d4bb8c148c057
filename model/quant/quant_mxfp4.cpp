// The MXFP4 quantizer (gpt-oss's expert weights): one E8M0 power-of-two scale per 32 values,
// each value the nearest of the 16 E2M1 levels (model/quant/quant_blocks.hpp, MXFP4).
//
// Source: the OCP Microscaling Formats (MX) specification v1.0 (E8M0 scale, E2M1 elements)
// and ggml's block_mxfp4 layout (ggml-common.h). The scale rule is loom's: the smallest power
// of two for which the block's largest magnitude fits the largest level (6), so nothing
// saturates; ggml's reference quantizer picks its exponent from floor(log2(amax)) instead.
#include <cmath>

#include "model/quant/quant_blocks.hpp"
#include "model/quant/quant_internal.hpp"

namespace loom::model::qdetail {

void quantize_block_mxfp4(const float* x, uint8_t* b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    // d = 2^(e - 128) must satisfy amax / d <= 12 (the largest doubled level).
    int e = 0;
    if (!std::isfinite(amax)) e = 255;
    else if (amax > 0) e = clampi(static_cast<int>(std::ceil(std::log2(amax / 12.0f))) + 128, 0, 255);
    b[0] = static_cast<uint8_t>(e);
    const float d = blocks::e8m0_half(b[0]);
    for (int j = 0; j < 16; ++j) {
        int q[2];
        for (int h = 0; h < 2; ++h) {
            const float v = x[j + 16 * h] / d;
            int best = 0;
            for (int i = 1; i < 16; ++i)
                if (std::fabs(v - static_cast<float>(blocks::kMxfp4Values[i])) <
                    std::fabs(v - static_cast<float>(blocks::kMxfp4Values[best])))
                    best = i;
            q[h] = best;
        }
        b[1 + j] = static_cast<uint8_t>(q[0] | (q[1] << 4));
    }
}

}  // namespace loom::model::qdetail
