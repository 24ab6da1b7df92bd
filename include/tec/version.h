// tec's version. The plan format carries its own version; this one names the tools.
#pragma once

#define TEC_VERSION_MAJOR 0
#define TEC_VERSION_MINOR 1
#define TEC_VERSION_PATCH 0
#define TEC_VERSION_STRING "0.1.0"
