# The reference backend: portable C11, float64 accumulation, every op. The ground truth.
file(GLOB _ref_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.c)
list(APPEND KITE_BUILTIN_SOURCES ${_ref_sources})
