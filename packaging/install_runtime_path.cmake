# Runs at install time (cmake --install, cpack), after libhvd is installed. CMAKE_INSTALL_PREFIX is then the
# prefix being installed to, which `cmake --install --prefix` may change after configuring, so what depends on
# it is decided here, from whether the library folder is on the dynamic linker's search path (its trusted
# folders, or a folder named by /etc/ld.so.conf):
#
# * on it (/usr/local, /usr): the plain hvd.pc and hvdConfig.cmake; ld.so finds libhvd.so.0 through its cache
#   once ldconfig has run, which is done here when we are root and DESTDIR is empty. Otherwise a line says to
#   run it (not root), or it is left to the machine that gets the staged files (DESTDIR; the .deb runs
#   ldconfig from its postinst).
# * off it ($HOME/.local, /opt/...): the hvd.pc and hvdConfig.cmake that make the programs built with them
#   record the library folder as their run path, so they start without LD_LIBRARY_PATH.
#
# Set by the install(CODE) that includes this file:
#   HVD_LIBDIR            CMAKE_INSTALL_LIBDIR (relative to the prefix, or absolute)
#   HVD_LIBRARY_ARCH      CMAKE_LIBRARY_ARCHITECTURE (x86_64-linux-gnu), may be empty
#   HVD_VARIANTS_DIR      folder holding system/ and runpath/, each with hvd.pc and hvdConfig.cmake
#   HVD_CMAKE_DIR         where hvdConfig.cmake goes, relative to the prefix

set(_hvd_libdir "${HVD_LIBDIR}")
if(NOT IS_ABSOLUTE "${_hvd_libdir}")
  set(_hvd_libdir "${CMAKE_INSTALL_PREFIX}/${_hvd_libdir}")
endif()
get_filename_component(_hvd_libdir "${_hvd_libdir}" ABSOLUTE)

# The folders of an ld.so.conf file and of the files it includes (glob patterns, relative to its folder).
function(_hvd_ld_conf_dirs conf out)
  set(dirs)
  if(EXISTS "${conf}")
    get_filename_component(conf_dir "${conf}" DIRECTORY)
    file(STRINGS "${conf}" lines)
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "#.*" "" line "${line}")
      string(STRIP "${line}" line)
      if(line MATCHES "^include[ \t]+(.+)$")
        string(REGEX REPLACE "[ \t]+" ";" patterns "${CMAKE_MATCH_1}")
        foreach(pattern IN LISTS patterns)
          if(NOT IS_ABSOLUTE "${pattern}")
            set(pattern "${conf_dir}/${pattern}")
          endif()
          file(GLOB included "${pattern}")
          list(SORT included)
          foreach(file IN LISTS included)
            _hvd_ld_conf_dirs("${file}" sub)
            list(APPEND dirs ${sub})
          endforeach()
        endforeach()
      elseif(line MATCHES "^/" )
        # "DIR" or the old "DIR=TYPE" form.
        string(REGEX REPLACE "=.*" "" line "${line}")
        list(APPEND dirs "${line}")
      endif()
    endforeach()
  endif()
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

# ld.so searches its trusted folders without a cache, and the ld.so.conf folders through it.
set(_hvd_search_dirs /lib /usr/lib /lib64 /usr/lib64)
if(HVD_LIBRARY_ARCH)
  list(APPEND _hvd_search_dirs /lib/${HVD_LIBRARY_ARCH} /usr/lib/${HVD_LIBRARY_ARCH})
endif()
_hvd_ld_conf_dirs(/etc/ld.so.conf _hvd_conf_dirs)
list(APPEND _hvd_search_dirs ${_hvd_conf_dirs})

set(_hvd_system_libdir OFF)
get_filename_component(_hvd_libdir_real "${_hvd_libdir}" REALPATH)
foreach(_hvd_dir IN LISTS _hvd_search_dirs)
  get_filename_component(_hvd_dir_abs "${_hvd_dir}" ABSOLUTE)
  get_filename_component(_hvd_dir_real "${_hvd_dir}" REALPATH)
  # By name (a staged install's folder need not exist yet), or by the folder itself (/lib is /usr/lib).
  if(_hvd_dir_abs STREQUAL _hvd_libdir OR
     (EXISTS "${_hvd_dir}" AND EXISTS "${_hvd_libdir}" AND _hvd_dir_real STREQUAL _hvd_libdir_real))
    set(_hvd_system_libdir ON)
    break()
  endif()
endforeach()

if(_hvd_system_libdir)
  set(_hvd_variant "${HVD_VARIANTS_DIR}/system")
else()
  set(_hvd_variant "${HVD_VARIANTS_DIR}/runpath")
endif()
# file(INSTALL) puts DESTDIR in front of these folders and records the files in install_manifest.txt.
file(INSTALL DESTINATION "${_hvd_libdir}/pkgconfig" TYPE FILE FILES "${_hvd_variant}/hvd.pc")
set(_hvd_cmake_dir "${HVD_CMAKE_DIR}")
if(NOT IS_ABSOLUTE "${_hvd_cmake_dir}")
  set(_hvd_cmake_dir "${CMAKE_INSTALL_PREFIX}/${_hvd_cmake_dir}")
endif()
file(INSTALL DESTINATION "${_hvd_cmake_dir}" TYPE FILE FILES "${_hvd_variant}/hvdConfig.cmake")

if(NOT _hvd_system_libdir)
  message(STATUS "hvd: ${_hvd_libdir} is not on the dynamic linker's search path: programs built with "
                 "hvd.pc or hvd::hvd get it as their run path")
elseif(NOT "$ENV{DESTDIR}" STREQUAL "")
  message(STATUS "hvd: staged in DESTDIR=$ENV{DESTDIR}: run ldconfig on the machine these files are copied to")
else()
  execute_process(COMMAND id -u OUTPUT_VARIABLE _hvd_uid OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_program(_hvd_ldconfig ldconfig PATHS /sbin /usr/sbin NO_DEFAULT_PATH)
  if(NOT _hvd_uid STREQUAL "0")
    message(NOTICE "hvd: run `sudo ldconfig` so that programs find libhvd.so.0 in ${_hvd_libdir} "
                   "(only root can refresh the dynamic linker's cache)")
  elseif(NOT _hvd_ldconfig)
    message(NOTICE "hvd: no ldconfig in /sbin or /usr/sbin: run ldconfig so that programs find libhvd.so.0 "
                   "in ${_hvd_libdir}")
  else()
    execute_process(COMMAND "${_hvd_ldconfig}" RESULT_VARIABLE _hvd_rv ERROR_VARIABLE _hvd_err
                    ERROR_STRIP_TRAILING_WHITESPACE)
    if(_hvd_rv EQUAL 0)
      message(STATUS "hvd: ran ${_hvd_ldconfig}: ${_hvd_libdir} is on the dynamic linker's search path")
    else()
      string(REPLACE "\n" "; " _hvd_err "${_hvd_err}")
      message(NOTICE "hvd: ${_hvd_ldconfig} failed (${_hvd_rv}: ${_hvd_err}): run it again so that programs "
                     "find libhvd.so.0 in ${_hvd_libdir}")
    endif()
  endif()
endif()
