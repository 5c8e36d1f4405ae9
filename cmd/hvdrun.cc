// hvdrun: a horovodrun-compatible launcher. All logic lives in hvd::launcher (launcher/hvdrun.h).
#include "launcher/hvdrun.h"

int main(int argc, char** argv) { return hvd::launcher::hvdrunMain(argc, argv); }
