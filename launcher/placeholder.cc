namespace hvd::launcher {}
