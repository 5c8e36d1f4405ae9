# Sourced by the GPU checks (bash): makes the bundle of make_bundle.sh usable on the GPU machine.
#
# In:  DIR (the bundle), REPO (repository root), WORK (a scratch folder), LOG (a file).
# Out: LD_LIBRARY_PATH (the bundle's libraries; lib/extra only where ldd finds one missing),
#      $WORK/build, laid out as a build tree: hvdrun, hvd-proxy and python/hvd with hvd._core built here for
#      this machine's python3 (tests/python/conftest.py reads it as HVD_BUILD_DIR, and hvdrun finds the
#      package beside itself); PYTHONPATH starting with $WORK/build/python and the bundle's site/.
# Returns non-zero when hvd._core does not build (the compiler's output is in LOG).
export LD_LIBRARY_PATH=$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ldd "$DIR/bin/hvdrun" "$DIR/lib/libhvd.so" | grep -q "not found"; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$DIR/lib/extra
fi
export PYTHONPATH=$WORK/build/python:$DIR/site${PYTHONPATH:+:$PYTHONPATH}
ext=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
[ -f "$WORK/build/python/hvd/_core$ext" ] && return 0  # set up already (run_all.sh, then check_pinning.sh)
mkdir -p "$WORK/build/python"
cp "$DIR/bin/hvdrun" "$DIR/bin/hvd-proxy" "$WORK/build/"  # copies: hvdrun looks for python/ beside its real path
rm -rf "$WORK/build/python/hvd" && cp -r "$REPO/python/hvd" "$WORK/build/python/"
{
  echo "== hvd._core for $(python3 --version)"
  c++ -O2 -shared -fPIC -std=c++20 $(python3 -m pybind11 --includes) "$REPO/python/core.cc" \
    -I"$REPO/runtime/include" -I"$DIR/include" -L"$DIR/lib" -lhvd -Wl,-rpath,"$DIR/lib" \
    -o "$WORK/build/python/hvd/_core$ext" && echo "hvd._core built"
} >>"$LOG" 2>&1
