namespace hvd::runtime {}
