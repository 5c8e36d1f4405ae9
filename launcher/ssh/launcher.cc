// Placeholder until the libssh2 launcher lands.
namespace hvd::launcher::ssh {}
