// hvd-rendezvous: see rendezvous/daemon.h.
#include "rendezvous/daemon.h"

int main(int argc, char** argv) { return hvd::rendezvous::daemonMain(argc, argv); }
