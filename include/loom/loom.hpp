// Loom's C++ API.
//
//   int main(int argc, char** argv) {
//     loom::init(&argc, &argv);          // joins the job started by loomrun (or mpirun)
//     std::printf("node %d of %d\n", loom::node_id(), loom::num_nodes());
//     loom::finalize();
//   }
//
// or, with RAII: `loom::Session session(&argc, &argv);`.
//
// init() reads the LOOM_* configuration (see `loomrun --help-config`), finds the job (loomrun,
// PMIx or a single node), connects to every node and starts this node's server thread. On any
// error it prints one line naming the problem and exits with status 2 (bad configuration) or 3
// (the job could not be formed). If another node of the job fails later, this node prints which
// one and exits with status 3: a Loom job never hangs on a dead peer.
//
// Thread safety: init()/finalize() once each, from one thread. node_id()/num_nodes() from any
// thread after init().
#pragma once

namespace loom {

void init(int* argc = nullptr, char*** argv = nullptr);
void finalize();
bool initialized();

int node_id();
int num_nodes();

class Session {
 public:
  Session(int* argc = nullptr, char*** argv = nullptr) { init(argc, argv); }
  ~Session() { finalize(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

}  // namespace loom
