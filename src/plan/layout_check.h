// The rules of a profile's memory that the executors rely on, checked by the plan reader
// (issue 51: a manifest rewritten with its checksum recomputed moved a buffer over a live one,
// and the CPU reference ran it to NaN with exit 0). After these, no "internal check" of an
// executor can fire on a plan the reader accepted.
#pragma once

#include <string>

#include "plan/plan.h"

namespace tec::plan {

// Each buffer lives in steps [first, last] inside the profile's steps; each tensor's buffers
// sit in the region its kind needs (weights in the constants, inputs in the input region,
// outputs in the output region, a state tensor in the state region, what steps write nowhere
// read-only); no two buffers share bytes while both live (the constants are live throughout).
// `where` names the manifest path of the profile in errors.
void check_buffer_layout(const Profile& profile, const std::string& file, const std::string& where);

// Every buffer a GPU launch of a step reads or writes is live in that step, and a run-level
// launch (a memset before the first step) touches no scratch buffer.
void check_launch_lifetimes(const Profile& profile, const std::string& file, const std::string& where);

}  // namespace tec::plan
