# Seed corpora for the fuzz targets, made from the examples by the tools under test:
# cmake -DTE_COMPILE=... -DTE_RUN=... -DSOURCE_DIR=... -DOUT=... -P make_seeds.cmake
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT}/json_frontend ${OUT}/plan_container ${OUT}/plan_manifest ${OUT}/npy)
file(GLOB examples ${SOURCE_DIR}/examples/*.json ${SOURCE_DIR}/tests/fuzz/regressions/*.json)
file(COPY ${examples} DESTINATION ${OUT}/json_frontend)
foreach(recipe bf16 fp8-delayed mxfp8 nvfp4 fp8-block)
  execute_process(COMMAND ${TE_COMPILE} ${SOURCE_DIR}/examples/mlp_tiny.json --recipe ${recipe} --shape T=32 -q
                          -o ${OUT}/plan_container/mlp_tiny_${recipe}.teplan
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "te-compile failed for ${recipe}")
  endif()
endforeach()
# The manifest fuzzer wraps its input around the fp8-delayed plan's blobs (TEC_FUZZ_BLOBS),
# so its seed is that plan's manifest.
execute_process(COMMAND ${TE_COMPILE} ${SOURCE_DIR}/examples/mlp_tiny.json --recipe fp8-delayed --shape T=32 -q
                        --dump-after plan
                OUTPUT_FILE ${OUT}/plan_manifest/mlp_tiny_fp8-delayed.json RESULT_VARIABLE rc)
execute_process(COMMAND ${TE_RUN} ${OUT}/plan_container/mlp_tiny_bf16.teplan --backend cpu --save-outputs ${OUT}/npy
                OUTPUT_QUIET RESULT_VARIABLE rc2)
if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "making the manifest or npy seeds failed")
endif()
