# Sources of the ssh launcher (libssh2), compiled into hvd_launcher. Owned by the ssh work.
set(HVD_LAUNCHER_SSH_SOURCES
  ssh/config.cc
  ssh/launcher.cc
  ssh/proxy.cc
  ssh/proxy_host.cc
  ssh/proxy_protocol.cc
  ssh/remote.cc
  ssh/session.cc
  ssh/tcp_link.cc
)
