// hvd-proxy: started by hvdrun over ssh, one per remote host; starts and watches that host's ranks
// (launcher/ssh/proxy.h). Not meant to be run by hand.
#include "launcher/ssh/proxy.h"

int main(int argc, char** argv) { return hvd::launcher::ssh::runProxy(argc, argv); }
