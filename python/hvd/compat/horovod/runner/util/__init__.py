"""horovod.runner.util on hvd: the helpers Horovod's own tests and scripts import (threads)."""
