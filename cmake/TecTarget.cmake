# Warnings and sanitizer flags for tec's own targets (never for third-party code).
function(tec_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wimplicit-fallthrough
                                           -Wno-missing-field-initializers  # designated initializers omit fields on purpose
                                           -ffp-contract=off)  # no FMA contraction: the CPU reference computes the GPU's bits (kernels/tec_math.h)
  # g++ 12 at -O3 warns -Wrestrict inside libstdc++ for `"literal" + std::string&&` (GCC bug
  # 105329, fixed in 13): a false positive in the standard library, not in tec.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(TEC_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(TEC_TSAN)
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
  if(TEC_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
    # g++ 12 with -fsanitize=address and any optimisation warns -Wmaybe-uninitialized inside
    # libstdc++'s variant/optional moves (GCC's documentation: the sanitizers' instrumentation
    # makes this warning unreliable); the sanitizer run itself is the stronger check.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endif()
  endif()
endfunction()

# tec_library(NAME SOURCES... DEPS ...): one module library under src/.
function(tec_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/kernels)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  tec_target_defaults(${name})
endfunction()
