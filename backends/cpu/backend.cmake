# The optimized CPU backend: the templated kernels (kernels/*.inc) instantiated once per ISA by
# cpu_isa_<isa>.c, the hand-written ones one file per family and ISA; which entry runs is decided
# at run time from CPUID (cpu_features.c) and the table in cpu_backend.c.
set(_cpu_dir ${CMAKE_CURRENT_LIST_DIR})
list(APPEND KITE_BUILTIN_SOURCES
  ${_cpu_dir}/cpu_backend.c ${_cpu_dir}/cpu_features.c ${_cpu_dir}/cpu_threadpool.c
  ${_cpu_dir}/cpu_isa_scalar.c ${_cpu_dir}/cpu_flce.c ${_cpu_dir}/cpu_penalties.c
  ${_cpu_dir}/cpu_wq4.c ${_cpu_dir}/cpu_moe_route.c ${_cpu_dir}/cpu_mla.c)
# Each file gets exactly the flags of the entries it serves (cpu_backend.c's table gives each
# entry the same feature bits); cpu_gemm_avx512.c enables the extensions of its bf16, VNNI and
# AMX micro-kernels per function.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(_cpu_avx2 -mavx2 -mfma -mf16c)
  set(_cpu_avx512 ${_cpu_avx2} -mavx512f -mavx512bw -mavx512vl -mavx512dq)
  set(_cpu_avx2_files cpu_isa_avx2.c cpu_gemm_avx2.c cpu_gemv_avx2.c cpu_moe_avx2.c
      cpu_quant_avx2.c cpu_topk_avx2.c cpu_wq4_avx2.c cpu_gguf_q8_avx2.c)
  foreach(f IN LISTS _cpu_avx2_files)
    list(APPEND KITE_BUILTIN_SOURCES ${_cpu_dir}/${f})
    set_source_files_properties(${_cpu_dir}/${f} PROPERTIES COMPILE_OPTIONS "${_cpu_avx2}")
  endforeach()
  list(APPEND KITE_BUILTIN_SOURCES ${_cpu_dir}/cpu_isa_avx512.c ${_cpu_dir}/cpu_gemm_avx512.c
       ${_cpu_dir}/cpu_wq4_avx512.c ${_cpu_dir}/cpu_isa_avx512bf16.c)
  set_source_files_properties(${_cpu_dir}/cpu_isa_avx512.c ${_cpu_dir}/cpu_gemm_avx512.c
    ${_cpu_dir}/cpu_wq4_avx512.c PROPERTIES COMPILE_OPTIONS "${_cpu_avx512}")
  set_source_files_properties(${_cpu_dir}/cpu_isa_avx512bf16.c PROPERTIES
    COMPILE_OPTIONS "${_cpu_avx512};-mavx512bf16")
  list(APPEND KITE_BUILTIN_SOURCES ${_cpu_dir}/cpu_gguf_q8_vnni.c)
  set_source_files_properties(${_cpu_dir}/cpu_gguf_q8_vnni.c PROPERTIES
    COMPILE_OPTIONS "${_cpu_avx512};-mavx512vnni")
endif()

# ---- library variants of the GEMM family, when the library is found -------------------------
# The libraries are not linked: the variants open them at run time (dlopen), so a build made
# where they exist loads where they do not; configure only needs their headers. The file found
# here is the fallback after the soname.
set(_gemm_defs "")
# The variant file of library `name` (cpu.<name>) when its header folder `inc` was found: compiled
# with it and, when the library file `lib` was found too, with KITE_<NAME>_PATH = that file;
# cpu_backend.c then gets KITE_HAVE_<NAME>. `missing` says what to install where it was not.
function(_kite_cpu_library_variant name file inc lib missing)
  string(TOUPPER ${name} up)
  if(NOT inc)
    message(STATUS "kite: ${missing}; cpu.${name} is not built")
    return()
  endif()
  message(STATUS "kite: cpu.${name} enabled (opened at run time; ${lib})")
  set(src ${_cpu_dir}/${file})
  set(KITE_BUILTIN_SOURCES ${KITE_BUILTIN_SOURCES} ${src} PARENT_SCOPE)
  set_source_files_properties(${src} PROPERTIES INCLUDE_DIRECTORIES ${inc})
  if(lib)
    set_property(SOURCE ${src} APPEND PROPERTY COMPILE_DEFINITIONS KITE_${up}_PATH="${lib}")
  endif()
  set(_gemm_defs ${_gemm_defs} KITE_HAVE_${up} PARENT_SCOPE)
endfunction()

option(KITE_WITH_OPENBLAS "Build the cpu.openblas linear variant when OpenBLAS is found" ON)
if(KITE_WITH_OPENBLAS)
  find_library(KITE_OPENBLAS_LIB NAMES openblas)
  find_path(KITE_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas openblas-pthread)
  _kite_cpu_library_variant(openblas cpu_gemm_blas.c "${KITE_CBLAS_INCLUDE}" "${KITE_OPENBLAS_LIB}"
                            "OpenBLAS headers not found (libopenblas-dev)")
endif()
option(KITE_WITH_ONEDNN "Build the cpu.onednn linear variants when oneDNN is found" ON)
set(KITE_ONEDNN_ROOT "" CACHE PATH "A oneDNN tree (include/, lib/) to use instead of the system's")
if(KITE_WITH_ONEDNN)
  set(_onednn_hints "")
  if(KITE_ONEDNN_ROOT)
    set(_onednn_hints HINTS ${KITE_ONEDNN_ROOT})
  endif()
  # a copied tree may hold only the versioned file; each folder is searched for every name first
  find_library(KITE_ONEDNN_LIB NAMES dnnl libdnnl.so.2 libdnnl.so.2.6 NAMES_PER_DIR
               ${_onednn_hints} PATH_SUFFIXES lib lib64)
  find_path(KITE_ONEDNN_INCLUDE oneapi/dnnl/dnnl.h ${_onednn_hints} PATH_SUFFIXES include)
  _kite_cpu_library_variant(onednn cpu_gemm_onednn.c "${KITE_ONEDNN_INCLUDE}" "${KITE_ONEDNN_LIB}"
                            "oneDNN headers not found (libdnnl-dev, or -DKITE_ONEDNN_ROOT=dir)")
endif()
if(_gemm_defs)
  set_property(SOURCE ${_cpu_dir}/cpu_backend.c APPEND PROPERTY COMPILE_DEFINITIONS ${_gemm_defs})
endif()
