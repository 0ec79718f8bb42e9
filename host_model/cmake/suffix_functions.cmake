# cmake -DNM=nm -DOBJCOPY=objcopy -DSUFFIX=_aic -DOUT_DIR=dir -DOBJECTS="a.o|b.o" -P suffix_functions.cmake
# Copies each object to OUT_DIR/<name>.o with every function that any of the objects defines (global
# or weak) and every COMDAT group signature renamed to <symbol>SUFFIX, in the definitions and in the
# references.
# See AscendcModelKernel.cmake for why.
string(REPLACE "|" ";" objects "${OBJECTS}")
file(MAKE_DIRECTORY ${OUT_DIR})
set(functions "")
foreach(obj ${objects})
    execute_process(COMMAND ${NM} --defined-only -P ${obj} OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${NM} failed on ${obj}")
    endif()
    string(REPLACE "\n" ";" lines "${listing}")
    foreach(line ${lines})
        # T/W: global or weak functions; n with a C++ name: the signature of a COMDAT group holding
        # constructor/destructor aliases (C5/D5), which must differ between the builds as well, or the
        # linker keeps one build's group and the other's aliases end up undefined.
        if(line MATCHES "^([^ ]+) [TW] ")
            list(APPEND functions ${CMAKE_MATCH_1})
        elseif(line MATCHES "^(_Z[^ ]+) n ")
            list(APPEND functions ${CMAKE_MATCH_1})
        endif()
    endforeach()
endforeach()
list(REMOVE_DUPLICATES functions)  # weak definitions repeat across objects; objcopy wants each once
set(map "")
foreach(f ${functions})
    string(APPEND map "${f} ${f}${SUFFIX}\n")
endforeach()
set(map_file ${OUT_DIR}/redefine_syms.txt)
file(WRITE ${map_file} "${map}")
foreach(obj ${objects})
    get_filename_component(name ${obj} NAME)
    # CMake names objects <source>.cpp.o; the outputs declared by the function are <source>.o.
    string(REGEX REPLACE "\\.[^.]+\\.o$" ".o" name ${name})
    execute_process(COMMAND ${OBJCOPY} --redefine-syms=${map_file} ${obj} ${OUT_DIR}/${name} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${OBJCOPY} failed on ${obj}")
    endif()
endforeach()
