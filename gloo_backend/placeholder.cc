namespace hvd::gloo_backend {}
