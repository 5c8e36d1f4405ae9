// How many cores a host's ranks have between them, which decides whether the host is oversubscribed (more
// ranks than cores). On an oversubscribed host nothing polls: a polling thread would take the core from the
// rank it waits for, so the background thread sleeps between operations and the shared-memory transport
// sleeps soon after it begins to wait.
//
// A rank's own affinity mask is not the answer. A launcher that binds ranks gives each one its own CPUs:
// Open MPI's mpirun binds each rank to a core by default (np <= 2), Slurm's task/affinity plugin binds each
// task to its CPUs, and `taskset -c $HOROVOD_LOCAL_RANK` does by hand. Each rank then sees one CPU, yet every
// rank has a core of its own. Ranks all bound to the same CPU (`taskset -c 0 hvdrun -np 2 ...`) see one CPU
// too, and those are oversubscribed. The union of the masks of the host's ranks tells the two apart.
#pragma once

#include <cstdint>
#include <vector>

#include "gloo_backend/communicator.h"

namespace hvd::runtime {

// The calling thread's affinity mask, one byte per CPU (1: it may run there), CPU_SETSIZE bytes; every CPU
// online where the mask cannot be read.
std::vector<uint8_t> ownCpus();

// The CPUs set in a mask as ownCpus() returns it.
int countCpus(const std::vector<uint8_t>& cpus);

// Collective over the host's ranks (`local`, in order): the CPUs in the union of their affinity masks, each
// rank's taken on its calling thread. Throws what the communicator throws.
int hostCores(gloo_backend::Communicator& local);

// Whether another host of the job runs on this host's kernel (hosts that are network namespaces or containers
// of one machine, told apart by the kernel's boot id): their ranks then share the CPUs that hostCores()
// counted as this host's alone. Collective over `cross` (this rank's peers on the other hosts) and then
// `local` (the host's ranks, null for a host of one rank), so that a host's ranks answer alike. Throws what
// the communicators throw.
bool sharesMachine(gloo_backend::Communicator& cross, gloo_backend::Communicator* local);

}  // namespace hvd::runtime
