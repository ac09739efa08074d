# CPU TWIN of CANN's ascendc.cmake -- a test double, not CANN.
#
# ascendc_library(<name> STATIC|SHARED <kernel sources>) builds the AscendC kernels with the host C++
# compiler against the AscendC twin (kernel_operator.h) and, as CANN's build does, makes for every
# `extern "C" __global__ __aicore__` kernel its launch function aclrtlaunch_<kernel>(blockDim, stream,
# args...) with the header aclrtlaunch_<kernel>.h; here the launch queues the kernel on the twin's
# stream, which runs it on the AscendC twin when the stream is synchronised.
# ascendcl and nnopbase, CANN's runtime libraries, are empty: the twin's runtime lives in its headers.
get_filename_component(FG_ASCEND_TWIN_DIR ${CMAKE_CURRENT_LIST_FILE} REALPATH)
get_filename_component(FG_ASCEND_TWIN_DIR ${FG_ASCEND_TWIN_DIR}/../.. ABSOLUTE)  # tests/ascend_twin
foreach(lib ascendcl nnopbase)
    if(NOT TARGET ${lib})
        add_library(${lib} INTERFACE)
    endif()
endforeach()

function(ascendc_library name type)
    set(dir ${CMAKE_CURRENT_BINARY_DIR}/${name}_launch)
    file(MAKE_DIRECTORY ${dir})
    set(shim "// made by the twin's ascendc_library: the kernels and their launch functions\n")
    string(APPEND shim "#include \"kernel_operator.h\"\n")
    set(found 0)
    foreach(src ${ARGN})
        get_filename_component(abs ${src} ABSOLUTE)
        file(READ ${abs} text)
        string(APPEND shim "#include \"${abs}\"\n")
        string(REGEX MATCHALL "extern \"C\" __global__ __aicore__ void [A-Za-z0-9_]+\\([^)]*\\)" kernels "${text}")
        foreach(k IN LISTS kernels)
            string(REGEX REPLACE "^.* void ([A-Za-z0-9_]+)\\((.*)\\)$" "\\1" kname "${k}")
            string(REGEX REPLACE "^.* void ([A-Za-z0-9_]+)\\((.*)\\)$" "\\2" params "${k}")
            string(REGEX REPLACE "[ \t\r\n]+" " " params "${params}")
            string(REPLACE "GM_ADDR " "void *" decl "${params}")
            string(REGEX REPLACE "GM_ADDR ([A-Za-z0-9_]+)" "(uint8_t *)\\1" call "${params}")
            file(WRITE ${dir}/aclrtlaunch_${kname}.h
                "#ifndef HEADER_ACLRTLAUNCH_${kname}_H\n#define HEADER_ACLRTLAUNCH_${kname}_H\n"
                "#include <stdint.h>\n#include \"acl/acl.h\"\n"
                "extern \"C\" uint32_t aclrtlaunch_${kname}(uint32_t blockDim, aclrtStream stream, ${decl});\n#endif\n")
            string(APPEND shim "#include \"aclrtlaunch_${kname}.h\"\n"
                "uint32_t aclrtlaunch_${kname}(uint32_t blockDim, aclrtStream stream, ${decl}) {\n"
                "    fg_twin_acl::enqueue(stream, [=] { fg_twin::launch(blockDim, [&] { ${kname}(${call}); }); });\n"
                "    return 0;\n}\n")
            math(EXPR found "${found} + 1")
        endforeach()
    endforeach()
    if(found EQUAL 0)
        message(FATAL_ERROR "ascendc_library(${name}): no __global__ __aicore__ kernels in ${ARGN}")
    endif()
    file(WRITE ${dir}/${name}_launch.cpp "${shim}")
    add_library(${name} ${type} ${dir}/${name}_launch.cpp)
    set_target_properties(${name} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
    target_include_directories(${name} PUBLIC ${dir} PRIVATE ${FG_ASCEND_TWIN_DIR})
endfunction()

function(ascendc_include_directories name)
    target_include_directories(${name} ${ARGN})
endfunction()

function(ascendc_compile_definitions name)
    target_compile_definitions(${name} ${ARGN})
endfunction()
