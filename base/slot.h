// A rank's place in a job (horovodrun's SlotInfo): its rank among all ranks, its local rank among the
// ranks on its host, and its cross rank among the ranks that share its local rank (one per host). The
// launcher plans these, the rendezvous server hands them out per elastic round, and the runtime runs with
// them; each keeps them in a type derived from this one, so a place is copied whole from one to another.
#pragma once

namespace hvd {

struct SlotInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

}  // namespace hvd
