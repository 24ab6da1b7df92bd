// The row kernel's producers (kernels/row.cu, TEC_PRODUCER): what computes element i of an
// output row before the output stage stores or quantizes it. The one list, read by row.cu's
// #if branches and by the host that picks one (src/codegen/lower.cpp), so a number means one
// thing in both. Each producer's slots and defines are described in row.cu.
#pragma once

// Forward.
#define TEC_ROW_LOAD 1              // a load (TEC_IN_DTYPE)
#define TEC_ROW_LAYERNORM 2
#define TEC_ROW_RMSNORM 3
#define TEC_ROW_ACTIVATION 4        // unary activation (TEC_ACT)
#define TEC_ROW_GATED 5             // gated activation: act(x[:n]) * x[n:]
#define TEC_ROW_ADD 6
#define TEC_ROW_BIAS 7              // + bias (TEC_RESIDUAL: then + the residual in slot 2)
#define TEC_ROW_SCALE 8             // x TEC_SCALE
#define TEC_ROW_DEQUANTIZE 9        // TEC_DQ: the quantized format
#define TEC_ROW_UNARY 10            // the general ops' unary math (TEC_UNARY)
#define TEC_ROW_BINARY 11           // binary with numpy broadcasting (TEC_BINARY)
// (12: free; reductions are on the general path, kernels/general.cu)
#define TEC_ROW_GEMM_EPILOGUE 13    // a GEMM's fp32 product with its epilogue in fp32
#define TEC_ROW_L2NORM 14           // x / sqrt(sum x^2 + eps)
#define TEC_ROW_STRIDED_GATHER 15   // a gather through strides (transpose)
// Backward (train plans).
#define TEC_ROW_ACTIVATION_BACKWARD 16  // dy * act'(x)
#define TEC_ROW_GATED_BACKWARD 17       // the gated activations' [da | db]
#define TEC_ROW_NORM_BACKWARD 18        // the norms' dx
// The MoE layer.
#define TEC_ROW_PERMUTE 19              // moe_permute: a gather of rows
#define TEC_ROW_UNPERMUTE 20            // moe_unpermute: the router-weighted sum of TEC_TOPK rows
#define TEC_ROW_ROPE 21                 // attention's glue: rope
#define TEC_ROW_UNPERMUTE_BACKWARD 22   // moe_unpermute's backward scatter
#define TEC_ROW_EMBEDDING 23            // an embedding lookup of int32 token ids
