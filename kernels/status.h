// The session's status word: bits a kernel sets (atomicOr) when data it reads at run time is
// hostile - an MoE routing, a token id or a padding mask that would index out of bounds. The kernel then reads or writes
// nothing out of bounds; the runtime zeroes the word before each run and reports the bits when
// results are read (src/runtime/session.cpp), with no host synchronisation of its own.
#pragma once

#define TEC_STATUS_BAD_EXPERT 1   // an expert index outside [0, E) (moe_permute)
#define TEC_STATUS_BAD_SPLITS 2   // m_splits negative, or not summing to the rows (grouped_linear)
#define TEC_STATUS_BAD_ROW_MAP 4  // a row map entry outside the expert outputs' rows (moe_unpermute)
#define TEC_STATUS_BAD_TOKEN_ID 8 // a token id outside the embedding table's rows (embedding)
#define TEC_STATUS_BAD_PADDING 16 // a padding mask row not ones then zeros (sequence_lengths)
#define TEC_STATUS_BAD_INDEX 32   // an index outside the axis it picks from (gather, gather_nd)
