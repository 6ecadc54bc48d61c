# Driver for the install test: cmake -DBUILD_DIR=.. -DSOURCE_DIR=.. -DWORK_DIR=.. -DMAKE_MODEL=..
#   [-DSANITIZE_FLAGS=..] -P run_consumer_test.cmake
# Installs actorflow's runtime component into a temporary prefix, configures and builds the
# consumer project against it with find_package(actorflow CONFIG REQUIRED), saves a model
# directory with MAKE_MODEL (built with the project) and runs the consumer on it.
file(REMOVE_RECURSE "${WORK_DIR}")
function(step)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGV}")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix" --component actorflow_runtime)
set(configure ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/consumer" -B "${WORK_DIR}/build"
  -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
if(CCACHE)
  list(APPEND configure -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE})
endif()
if(SANITIZE_FLAGS)
  list(APPEND configure "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SANITIZE_FLAGS}")
endif()
step(${configure})
step(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("${MAKE_MODEL}" "${WORK_DIR}/model")
step("${WORK_DIR}/build/consumer" "${WORK_DIR}/model")
