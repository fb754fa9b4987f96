# Finds dlpack/dlpack.h and sets DLPACK_INCLUDE_DIR. In order: -DDLPACK_INCLUDE_DIR, the system
# (Debian's libdlpack-dev), then the copy an installed PyTorch carries (a GPU machine with PyTorch
# often has no libdlpack-dev): torch/include/dlpack/dlpack.h, or torch/include/ATen/dlpack.h
# (where recent PyTorch keeps it), which is copied at configure time to
# <build>/dlpack-include/dlpack/dlpack.h so that kite.h's #include <dlpack/dlpack.h> finds it and
# `cmake --install` installs it beside kite's headers.
# Python interpreters asked: Python_EXECUTABLE / Python3_EXECUTABLE when set (pip's build passes
# its own), then python3 on PATH.
find_path(DLPACK_INCLUDE_DIR dlpack/dlpack.h)
if(NOT DLPACK_INCLUDE_DIR)
  set(_kite_pythons "")
  foreach(_py IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_py)
      list(APPEND _kite_pythons "${_py}")
    endif()
  endforeach()
  find_program(_kite_path_python NAMES python3 python)
  if(_kite_path_python)
    list(APPEND _kite_pythons "${_kite_path_python}")
  endif()
  foreach(_py IN LISTS _kite_pythons)
    # find_spec does not import torch (seconds, and CUDA initialisation)
    execute_process(
      COMMAND "${_py}" -c
              "import importlib.util as u, os; s = u.find_spec('torch'); print(os.path.join(os.path.dirname(s.origin), 'include') if s else '')"
      OUTPUT_VARIABLE _torch_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_torch_inc AND EXISTS "${_torch_inc}/dlpack/dlpack.h")
      set(DLPACK_INCLUDE_DIR "${_torch_inc}" CACHE PATH "folder holding dlpack/dlpack.h" FORCE)
      message(STATUS "kite: dlpack/dlpack.h from PyTorch (${_torch_inc})")
      break()
    elseif(_torch_inc AND EXISTS "${_torch_inc}/ATen/dlpack.h")
      configure_file("${_torch_inc}/ATen/dlpack.h"
                     "${CMAKE_BINARY_DIR}/dlpack-include/dlpack/dlpack.h" COPYONLY)
      set(DLPACK_INCLUDE_DIR "${CMAKE_BINARY_DIR}/dlpack-include" CACHE PATH
          "folder holding dlpack/dlpack.h" FORCE)
      message(STATUS "kite: dlpack/dlpack.h from PyTorch (${_torch_inc}/ATen/dlpack.h)")
      break()
    endif()
  endforeach()
endif()
if(NOT DLPACK_INCLUDE_DIR)
  message(FATAL_ERROR
    "dlpack/dlpack.h not found. Any one of these provides it: the Debian package libdlpack-dev "
    "(apt-get install libdlpack-dev); an installed PyTorch (its torch/include is searched through "
    "python3 on PATH or -DPython3_EXECUTABLE=...); or -DDLPACK_INCLUDE_DIR=<folder holding "
    "dlpack/dlpack.h>.")
endif()
