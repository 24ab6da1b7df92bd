# Seed corpora for the fuzz targets, made from the examples by the tools under test:
# cmake -DTE_COMPILE=... -DTE_RUN=... -DPYTHON=... -DSOURCE_DIR=... -DOUT=... -P make_seeds.cmake
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT}/json_frontend ${OUT}/plan_container ${OUT}/plan_manifest ${OUT}/npy ${OUT}/onnx_frontend)
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
# Train plans (state, SSA versions of state, backward ops, columnwise reads): the hostile
# cases of tests/reference/train_test.cpp start from these.
foreach(train "mlp_tiny;fp8-delayed;--optimizer;adamw" "swiglu_mlp;bf16;--wgrad;write")
  list(GET train 0 model)
  list(GET train 1 recipe)
  list(SUBLIST train 2 2 extra)
  execute_process(COMMAND ${TE_COMPILE} ${SOURCE_DIR}/examples/${model}.json --recipe ${recipe} --shape T=32 -q --mode train ${extra}
                          -o ${OUT}/plan_container/${model}_${recipe}_train.teplan
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "te-compile --mode train failed for ${model} ${recipe}")
  endif()
endforeach()
# A tensor-parallel plan: every rank's constants blob, collective steps, tp layouts, and NCCL
# launches overlapped with GEMM row blocks (fork/join, side stream, row offsets).
execute_process(COMMAND ${TE_COMPILE} ${SOURCE_DIR}/examples/mlp_tp.json --tp 2 --shape T=64 --tp-overlap on -q
                        -o ${OUT}/plan_container/mlp_tp2.teplan
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "te-compile --tp 2 failed")
endif()
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
# Every manifest regression (buffers over live ones, outputs in the constants: issue 51) seeds
# the manifest fuzzer too.
file(GLOB manifest_regressions ${SOURCE_DIR}/tests/fuzz/regressions/*.manifest)
file(COPY ${manifest_regressions} DESTINATION ${OUT}/plan_manifest)
# ONNX: small generated models (the exported examples are too large to mutate quickly) and
# every ONNX regression.
file(GLOB onnx_regressions ${SOURCE_DIR}/tests/fuzz/regressions/*.onnx)
if(onnx_regressions)
  file(COPY ${onnx_regressions} DESTINATION ${OUT}/onnx_frontend)
endif()
# Real exports (transformers' decoder layers, sdpa attention, both exporters) reach the
# canonical rewrites, which no generated seed spells.
# (Decoder layers and blocks only: a whole LM's export is past the fuzzer's -max_len.)
file(GLOB onnx_real_exports ${SOURCE_DIR}/tests/onnx/hf_corpus/*_layer.sdpa.*.onnx ${SOURCE_DIR}/tests/onnx/hf_corpus/*_block.sdpa.*.onnx)
file(COPY ${onnx_real_exports} DESTINATION ${OUT}/onnx_frontend)
execute_process(COMMAND ${PYTHON} ${SOURCE_DIR}/tests/fuzz/onnx_seeds.py ${OUT}/onnx_frontend OUTPUT_QUIET RESULT_VARIABLE rc3)
if(NOT rc3 EQUAL 0)
  message(FATAL_ERROR "making the ONNX seeds failed (needs the Python package onnx: .ci/install-deps.sh)")
endif()
