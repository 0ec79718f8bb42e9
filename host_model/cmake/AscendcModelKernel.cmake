# ascendc_model_add_kernel(<target> SOURCES <kernel .cpp files>)
#
# Builds a static library <target> holding the kernel sources compiled twice, as CANN compiles a mixed
# kernel once for the cube core and once for the vector core (asc-devkit impl/utils/sys_macros.h:
# g_coreType is a constexpr per compile, ASCEND_IS_AIC is `constexpr(g_coreType == AscendC::AIC)`):
#   ASCENDC_MODEL_CORE_TYPE=1 (AIC) and =2 (AIV), see host_model/include/host_model/kernel_macros.h.
# The two builds define the same inline functions and templates with different bodies (an
# `if ASCEND_IS_AIC` block is empty in the AIV build), which the linker would merge. So every function
# an object defines gets the suffix _aic or _aiv (objcopy --redefine-syms, map from nm): the kernel
# entry `foo` becomes foo_aic / foo_aiv, which the launcher passes to LaunchMix(cfg, aicBody, aivBody).
# Data symbols are not renamed: the two builds share them, as the model's state is shared.
function(ascendc_model_add_kernel target)
    set(suffix_script ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/suffix_functions.cmake)
    cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
    if(NOT ARG_SOURCES)
        message(FATAL_ERROR "ascendc_model_add_kernel(${target}): no SOURCES")
    endif()
    find_program(ASCENDC_MODEL_NM nm REQUIRED)
    find_program(ASCENDC_MODEL_OBJCOPY objcopy REQUIRED)
    set(renamed)
    foreach(core aic aiv)
        if(core STREQUAL "aic")
            set(core_type 1)
        else()
            set(core_type 2)
        endif()
        set(objs ${target}_${core}_objects)
        add_library(${objs} OBJECT ${ARG_SOURCES})
        target_compile_definitions(${objs} PRIVATE ASCENDC_MODEL_CORE_TYPE=${core_type})
        target_link_libraries(${objs} PUBLIC ascendc_host_model)
        set_target_properties(${objs} PROPERTIES POSITION_INDEPENDENT_CODE ON)
        set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/${target}_${core})
        set(outputs)
        foreach(src ${ARG_SOURCES})
            get_filename_component(name ${src} NAME_WE)
            list(APPEND outputs ${out_dir}/${name}.o)
        endforeach()
        # One command renames the whole build: a function defined in one object and called from another
        # must get the same new name in both.
        add_custom_command(
            OUTPUT ${outputs}
            COMMAND ${CMAKE_COMMAND} -DNM=${ASCENDC_MODEL_NM} -DOBJCOPY=${ASCENDC_MODEL_OBJCOPY} -DSUFFIX=_${core}
                    -DOUT_DIR=${out_dir} "-DOBJECTS=$<JOIN:$<TARGET_OBJECTS:${objs}>,|>"
                    -P ${suffix_script}
            DEPENDS ${objs} $<TARGET_OBJECTS:${objs}> ${suffix_script}
            COMMENT "Kernel for the ${core} core type: suffixing its functions with _${core}"
            VERBATIM)
        set_source_files_properties(${outputs} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
        list(APPEND renamed ${outputs})
    endforeach()
    add_library(${target} STATIC ${renamed})
    set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
    target_link_libraries(${target} PUBLIC ascendc_host_model)
endfunction()
