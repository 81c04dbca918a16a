/*
 * nexar: distributed communication over encrypted QUIC.
 *
 * The public C ABI. This header is C99 and C++ clean and depends only on
 * <stddef.h> and <stdint.h>. Names, values and semantics written here are a
 * contract: they only ever grow.
 *
 * Thread safety
 *   - Every function may be called from any thread.
 *   - Submitting operations on one communicator from several threads at once is
 *     safe. Collectives on one communicator must be issued in the same order on
 *     every rank; ranks that disagree get NEXAR_ERR_MISMATCH, never a hang.
 *   - nexar_comm_destroy must not race with other calls on the same handle.
 *
 * fork()
 *   A child forked from a process holds copies of its communicators and
 *   seeds, but none of their threads. There every call on them fails with
 *   NEXAR_ERR_CLOSED saying so (nothing reaches the parent's peers), and
 *   nexar_comm_destroy / nexar_seed_stop only let the copy go; the parent's
 *   go on untouched. The child may make communicators of its own.
 *
 * Completion
 *   Every operation takes (nexar_done_fn done, void *user_data) last.
 *   - If the call returns NEXAR_OK, done is invoked exactly once (success,
 *     error, timeout, abort or destroy), never inside the submitting call.
 *   - If the call returns an error, done is never invoked.
 *   - done == NULL blocks until the operation completes and returns its final
 *     status. From inside a completion callback this returns
 *     NEXAR_ERR_WOULD_DEADLOCK instead.
 *   - Callbacks run on nexar's completion thread, serialized per communicator
 *     in completion order; in polled mode (NEXAR_COMPLETION_POLLED) they run
 *     on the thread calling nexar_comm_poll.
 *   - Buffers stay owned by the caller and must stay valid and untouched until
 *     done has returned.
 *
 * Errors
 *   Functions return a nexar_status_t: NEXAR_OK or a negative NEXAR_ERR_*.
 *   A call that fails records its failure for the calling thread; read it
 *   with nexar_last_error (status, failed rank, operation number, message)
 *   or nexar_last_error_message right after the call.
 *
 * Ownership
 *   Handles (nexar_comm_t, nexar_seed_t, nexar_rpc_response_t) are made by
 *   nexar and released by the caller with the function named at each
 *   constructor. Strings that nexar returns are owned by nexar for the
 *   lifetime stated at each function; strings and structs passed in are
 *   copied unless stated otherwise.
 *
 * Stability
 *   Everything here is stable except what is fenced as "diagnostics: may
 *   change before 1.0" (statistics counters and tuning knobs that name an
 *   internal technique): those keep their place and type in their struct, but
 *   their meaning may change or they may stop being filled (then reading 0).
 */
#ifndef NEXAR_H
#define NEXAR_H

#include <stddef.h>
#include <stdint.h>

#if defined(NEXAR_BUILDING_LIBRARY) && defined(__GNUC__)
#define NEXAR_API __attribute__((visibility("default")))
#else
#define NEXAR_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version --------------------------------------------------------------- */

#define NEXAR_VERSION_MAJOR 0
#define NEXAR_VERSION_MINOR 1
#define NEXAR_VERSION_PATCH 0
#define NEXAR_VERSION_NUMBER \
  (NEXAR_VERSION_MAJOR * 10000 + NEXAR_VERSION_MINOR * 100 + NEXAR_VERSION_PATCH)
#define NEXAR_VERSION_STRING "0.1.0"

/**
 * The version of the library actually loaded, which may differ from the
 * header a program was compiled with.
 *
 * @return NEXAR_VERSION_NUMBER of the loaded library
 */
NEXAR_API uint32_t nexar_version(void);

/**
 * The version of the library actually loaded, as text.
 *
 * @return NEXAR_VERSION_STRING of the loaded library ("0.1.0"); static
 *         storage owned by nexar, never NULL
 */
NEXAR_API const char *nexar_version_string(void);

/* ---- Status codes (values never change) ------------------------------------- */

typedef int32_t nexar_status_t;

#define NEXAR_OK 0
#define NEXAR_ERR_INVALID_ARGUMENT (-1)
#define NEXAR_ERR_INVALID_RANK (-2)
#define NEXAR_ERR_SIZE_MISMATCH (-3)
#define NEXAR_ERR_TIMEOUT (-4)
#define NEXAR_ERR_PEER_FAILED (-5)
#define NEXAR_ERR_ABORTED (-6)
#define NEXAR_ERR_CLOSED (-7)
#define NEXAR_ERR_MISMATCH (-8)
#define NEXAR_ERR_TLS (-9)
#define NEXAR_ERR_AUTH (-10)
#define NEXAR_ERR_PROTOCOL (-11)
#define NEXAR_ERR_NO_MEMORY (-12)
#define NEXAR_ERR_IO (-13)
#define NEXAR_ERR_UNSUPPORTED (-14)
#define NEXAR_ERR_NOT_FOUND (-15)
#define NEXAR_ERR_WOULD_DEADLOCK (-16)
#define NEXAR_ERR_INTERNAL (-17)
#define NEXAR_ERR_RPC_NOT_REGISTERED (-18) /* no handler for that fn_id on the target rank */
#define NEXAR_ERR_RPC_FAILED (-19)         /* the target's handler returned an error */
#define NEXAR_ERR_REVOKED (-20)            /* the communicator was revoked, here or by a peer */
#define NEXAR_ERR_EXCLUDED (-21) /* the peers declared this process failed and removed it */

/**
 * A human-readable name for a status.
 *
 * @param status  any value; unknown ones are named NEXAR_ERR_UNKNOWN
 * @return "NAME: description" (e.g. "NEXAR_ERR_TIMEOUT: operation timed
 *         out"); static storage owned by nexar, never NULL
 */
NEXAR_API const char *nexar_status_str(nexar_status_t status);

/**
 * The message of this thread's last failed call: the message of the record
 * nexar_last_error reads (which calls set it and when it is cleared is
 * described there). Asynchronous failures carry their message in the
 * completion instead.
 *
 * @return the message; "" when the thread's last call succeeded or none has
 *         failed. Never NULL; owned by nexar (thread-local), valid until this
 *         thread's next failing nexar call. Does not change the record.
 */
NEXAR_API const char *nexar_last_error_message(void);

/* ---- Data types and reduction operators ------------------------------------ */

typedef int32_t nexar_dtype_t;
#define NEXAR_DTYPE_F32 0
#define NEXAR_DTYPE_F64 1
#define NEXAR_DTYPE_F16 2
#define NEXAR_DTYPE_BF16 3
#define NEXAR_DTYPE_I8 4
#define NEXAR_DTYPE_I32 5
#define NEXAR_DTYPE_I64 6
#define NEXAR_DTYPE_U8 7
#define NEXAR_DTYPE_U32 8
#define NEXAR_DTYPE_U64 9

/**
 * The size of one element of a data type.
 *
 * @param dtype  a NEXAR_DTYPE_* value
 * @return its size in bytes, or 0 for an unknown dtype
 */
NEXAR_API size_t nexar_dtype_size(nexar_dtype_t dtype);

typedef int32_t nexar_op_t;
#define NEXAR_OP_SUM 0
#define NEXAR_OP_PROD 1
#define NEXAR_OP_MIN 2
#define NEXAR_OP_MAX 3

/* ---- Handles and completion ------------------------------------------------- */

/** One rank's view of a group of processes. Made by nexar_bootstrap_local,
 * nexar_comm_join, nexar_comm_init_from_env or nexar_comm_split; released
 * with nexar_comm_destroy. */
typedef struct nexar_comm nexar_comm_t;
/** A discovery server that admits workers into a cluster. Made by
 * nexar_seed_start; released with nexar_seed_stop. */
typedef struct nexar_seed nexar_seed_t;

typedef struct nexar_completion {
  size_t struct_size;    /* sizeof(nexar_completion_t) as built into the library */
  nexar_status_t status; /* NEXAR_OK or the failure */
  int32_t failed_rank;   /* the rank that failed or did not answer, or -1 */
  uint64_t op_seq;       /* the operation's sequence number on its communicator */
  const char *message;   /* never NULL; valid only during the callback */
} nexar_completion_t;

/**
 * The completion callback of an operation (see "Completion" above).
 *
 * @param user_data   the pointer given with the operation
 * @param completion  its outcome; owned by nexar, valid only during the call
 */
typedef void (*nexar_done_fn)(void *user_data, const nexar_completion_t *completion);

/**
 * The full outcome of this thread's last failed call, as a completion: which
 * rank failed and which operation, not only the status.
 *
 * Every function that returns a nexar_status_t records its outcome in a
 * thread-local record (the same one nexar_last_error_message reads): a failure
 * replaces it, a success clears it. A blocking call (done == NULL) that fails
 * records the operation's own status, failed_rank (e.g. the peer a receive
 * waited for when it died or aborted) and op_seq; a call refused before it
 * got a number (bad argument, aborted or closed communicator) records op_seq
 * 0. Exceptions: nexar_last_error and nexar_last_error_message leave the
 * record alone; nexar_comm_get_async_error reports the communicator's failure
 * without recording it (it records only its own NULL-argument error);
 * nexar_comm_poll records its failures only; nexar_rpc_reply_alloc records
 * like a function returning a status; functions that return neither
 * (nexar_comm_rank, nexar_comm_destroy, ...) neither set nor clear it.
 * Asynchronous operations deliver their outcome to done and do not touch the
 * record.
 *
 * @param info  filled with the record. The caller sets info->struct_size to
 *              sizeof(nexar_completion_t) as it knows it; only the fields that
 *              fit are written, and info->struct_size becomes the size filled.
 *              When the last call succeeded (or none has failed on this thread
 *              yet): status NEXAR_OK, failed_rank -1, op_seq 0, message "".
 *              info->message is never NULL, is owned by nexar, and stays valid
 *              and unchanged until this thread's next failing nexar call.
 * @return NEXAR_OK when info was filled (whatever the recorded status is);
 *         NEXAR_ERR_INVALID_ARGUMENT when info is NULL or info->struct_size is
 *         too small to hold status. Never changes the record itself.
 */
NEXAR_API nexar_status_t nexar_last_error(nexar_completion_t *info);

/* ---- Options ---------------------------------------------------------------- */

#define NEXAR_COMPLETION_THREAD 0 /* callbacks on nexar's completion thread */
#define NEXAR_COMPLETION_POLLED 1 /* callbacks queued until nexar_comm_poll */

#define NEXAR_POOL_TRAINING 0
#define NEXAR_POOL_INFERENCE 1

/* Mesh topology (nexar_comm_options_t.topology, NEXAR_TOPOLOGY). In a sparse
 * topology a rank connects to its neighbours only; messages to any other rank
 * (point-to-point, collectives, RPC) are relayed by the ranks on a static
 * shortest route, transparently: same matching, ordering and errors. See
 * docs/relay.md. */
#define NEXAR_TOPOLOGY_FULL 0      /* every pair connected (default) */
#define NEXAR_TOPOLOGY_RING 1      /* rank r connects to r-1 and r+1 (mod N) only */
#define NEXAR_TOPOLOGY_KREGULAR 2  /* r connects to r+-1 .. r+-K/2 (mod N); K = topology_degree */
#define NEXAR_TOPOLOGY_HYPERCUBE 3 /* r connects to r XOR 2^b (at most ceil(log2 N)+1 links) */
#define NEXAR_TOPOLOGY_CUSTOM 4    /* the graph in topology_edges */

/* nexar_comm_options_t.shm */
#define NEXAR_SHM_AUTO 0    /* shared memory between same-host ranks when it can be set up */
#define NEXAR_SHM_OFF 1     /* every byte over QUIC */
#define NEXAR_SHM_REQUIRE 2 /* creation fails if a same-host pair cannot use shared memory */

#define NEXAR_LOG_ERROR 0
#define NEXAR_LOG_WARN 1
#define NEXAR_LOG_INFO 2
#define NEXAR_LOG_DEBUG 3
#define NEXAR_LOG_TRACE 4

/**
 * Options for creating communicators. Initialise with nexar_comm_options_init,
 * then change fields. The struct only grows at the end. Strings are copied by
 * the functions that take the options.
 */
typedef struct nexar_comm_options {
  size_t struct_size;
  uint32_t completion_mode;       /* NEXAR_COMPLETION_*; default THREAD */
  uint32_t pool_profile;          /* NEXAR_POOL_*; default TRAINING */
  uint64_t collective_timeout_ms; /* NEXAR_COLLECTIVE_TIMEOUT_SECS; default 30 s */
  uint64_t barrier_timeout_ms;    /* NEXAR_BARRIER_TIMEOUT_SECS; default 30 s */
  uint64_t p2p_timeout_ms;        /* NEXAR_P2P_TIMEOUT_SECS; default 300 s */
  uint64_t connect_timeout_ms;    /* NEXAR_CONNECT_TIMEOUT_SECS; default 30 s */
  uint64_t heartbeat_interval_ms; /* NEXAR_HEARTBEAT_INTERVAL_SECS; default 1 s */
  uint64_t heartbeat_timeout_ms;  /* NEXAR_HEARTBEAT_TIMEOUT_SECS; default 5 s */
  /* ---- Tuning knobs. Diagnostics: may change before 1.0. ----
   * They name internal techniques (algorithm switch points, segmenting,
   * busy-polling); their fields stay where they are, but what a value does
   * may change or be ignored. */
  uint64_t large_msg_bytes;        /* NEXAR_LARGE_MSG_BYTES; default 8 MiB */
  uint64_t pipeline_segment_bytes; /* NEXAR_PIPELINE_SEGMENT_BYTES; default 2 MiB */
  uint32_t ring_max_world;         /* NEXAR_RING_MAX_WORLD; default 8 */
  uint32_t spin_us;                /* NEXAR_SPIN_US: busy-poll before sleeping; 0 = off */
  /* ---- End of tuning knobs. ---- */
  /* Cluster formation through a seed (nexar_comm_join). */
  const char *seed_address;      /* NEXAR_SEED, "host:port" */
  const char *cluster_token;     /* NEXAR_CLUSTER_TOKEN */
  const char *listen_address;    /* NEXAR_LISTEN_ADDR, "host:port"; default picks one */
  const char *advertise_address; /* NEXAR_ADVERTISE_ADDR */
  const char *socket_ifname;     /* NEXAR_SOCKET_IFNAME, NCCL syntax */
  int32_t rank;                  /* NEXAR_RANK; -1 = assigned by the seed */
  uint32_t world_size;           /* NEXAR_WORLD_SIZE; 0 = unknown */
  uint64_t rpc_timeout_ms;       /* NEXAR_RPC_TIMEOUT_SECS; default 30 s, per nexar_rpc_call */
  uint32_t topology;             /* NEXAR_TOPOLOGY=full|ring|k_regular:K|hypercube;
                                    NEXAR_TOPOLOGY_*, default FULL.
                                    Every rank must use the same value. */
  /* Same-host path: ranks on one host (same boot id, network namespace and
   * uid) exchange point-to-point, collective and RPC payloads through shared
   * memory instead of QUIC. */
  uint32_t shm;           /* NEXAR_SHM=auto|off|require; NEXAR_SHM_*, default AUTO */
  uint64_t shm_max_bytes; /* NEXAR_SHM_MAX_BYTES: shared segment per process; default 64 MiB */
  /* Elastic membership (docs/elastic.md). With elastic = 1, nexar_comm_join
   * keeps its connection to an elastic seed (for nexar_comm_pending_joins and
   * nexar_comm_grow), and a process joining a running world waits up to
   * join_timeout_ms until the members admit it. */
  uint32_t elastic;         /* NEXAR_ELASTIC=1; default 0 */
  uint64_t join_timeout_ms; /* NEXAR_JOIN_TIMEOUT_SECS; default 300 s */
  /* Sparse topologies (docs/relay.md). Every rank must describe the same
   * graph: formation fails naming the ranks that disagree. */
  uint32_t topology_degree;       /* K of NEXAR_TOPOLOGY_KREGULAR (k_regular:K); default 4 */
  const uint32_t *topology_edges; /* NEXAR_TOPOLOGY_CUSTOM: 2 * topology_edge_count ranks, each
                                     pair one link; the graph must be connected. Copied. */
  size_t topology_edge_count;     /* pairs in topology_edges */
} nexar_comm_options_t;

/**
 * Fill opts with defaults, then apply NEXAR_* environment variables.
 *
 * @param opts         the caller's struct, written (fields past struct_size
 *                     are not touched)
 * @param struct_size  sizeof(nexar_comm_options_t) as the caller knows it
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when opts is NULL, struct_size
 *         is too small, or an environment value does not parse (the message
 *         names the variable)
 */
NEXAR_API nexar_status_t nexar_comm_options_init(nexar_comm_options_t *opts, size_t struct_size);

/* ---- Communicator lifecycle -------------------------------------------------- */

/**
 * Create world_size communicators in this process, joined by a full mesh of
 * real QUIC connections over loopback, each rank with its own engine.
 * Blocks until every connection is formed (bounded by connect_timeout_ms).
 *
 * @param comms       array with room for world_size handles; on success
 *                    comms[i] is rank i, owned by the caller (release each
 *                    with nexar_comm_destroy)
 * @param world_size  number of ranks, 1..1024
 * @param opts        options (copied), or NULL for defaults plus environment
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (comms NULL, world_size out of
 *         range, bad options), or why the mesh could not be formed (e.g.
 *         NEXAR_ERR_TIMEOUT); comms is then not written
 */
NEXAR_API nexar_status_t nexar_bootstrap_local(nexar_comm_t **comms, uint32_t world_size,
                                               const nexar_comm_options_t *opts);

/**
 * Join a cluster through a seed (opts->seed_address, "host:port"). Binds this
 * worker's socket (listen_address, else socket_ifname, else the interface that
 * routes to the seed), connects to the seed with retries and backoff (bounded
 * by connect_timeout_ms), proves knowledge of cluster_token bound to that TLS
 * session, asks for opts->rank (-1 = any) in a world of opts->world_size
 * (0 = whatever the seed forms), receives its rank and a certificate signed
 * from a request made here (the private key never leaves this process), then
 * forms the mutual-TLS mesh with every other rank. *out is rank's view of the
 * whole world. See docs/cluster.md.
 *
 * @param out   on success the communicator, owned by the caller (release with
 *              nexar_comm_destroy); NULL on failure
 * @param opts  options (copied); opts->seed_address is required
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (out NULL, bad options),
 *         NEXAR_ERR_AUTH when the token does not match on both sides, or why
 *         the cluster could not be formed (e.g. NEXAR_ERR_TIMEOUT;
 *         nexar_last_error names the rank to blame, if any)
 */
NEXAR_API nexar_status_t nexar_comm_join(nexar_comm_t **out, const nexar_comm_options_t *opts);

/**
 * Join a cluster described by the environment, in this order: NEXAR_SEED
 * (with NEXAR_RANK, NEXAR_WORLD_SIZE); torchrun / env:// (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT); Open MPI (OMPI_COMM_WORLD_RANK/SIZE); PMI
 * (PMI_RANK/PMI_SIZE); Slurm (SLURM_PROCID/SLURM_NTASKS). Without NEXAR_SEED,
 * rank 0 hosts an embedded seed. See docs/cluster.md.
 *
 * @param out  on success the communicator, owned by the caller (release with
 *             nexar_comm_destroy); NULL on failure
 * @return NEXAR_OK; NEXAR_ERR_NOT_FOUND, listing what it looked for, when
 *         nothing fits; otherwise the failures of nexar_comm_join
 */
NEXAR_API nexar_status_t nexar_comm_init_from_env(nexar_comm_t **out);

/**
 * Release the handle. Pending operations complete with NEXAR_ERR_CLOSED before
 * this returns; no callback for this communicator runs afterwards. Peers see
 * this rank fail (NEXAR_ERR_PEER_FAILED) unless they are done with it.
 * Communicators split from this one stay usable. Must not race with other
 * calls on the same handle. In a child forked after comm was made it only
 * lets the child's copy go (see fork() above).
 *
 * @param comm  the handle to release (invalid afterwards); NULL is ignored
 */
NEXAR_API void nexar_comm_destroy(nexar_comm_t *comm);

/**
 * Fail every pending operation now with NEXAR_ERR_ABORTED and tell the peers
 * (theirs fail with NEXAR_ERR_ABORTED naming this rank). The handle stays
 * valid (every later operation fails) until destroyed. Calling it again does
 * nothing.
 *
 * @param comm  the communicator
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm is NULL
 */
NEXAR_API nexar_status_t nexar_comm_abort(nexar_comm_t *comm);

/**
 * This process's rank in the communicator.
 *
 * @param comm  the communicator
 * @return its rank, 0..size-1; 0 when comm is NULL
 */
NEXAR_API uint32_t nexar_comm_rank(const nexar_comm_t *comm);

/**
 * The number of ranks in the communicator.
 *
 * @param comm  the communicator
 * @return its size; 0 when comm is NULL
 */
NEXAR_API uint32_t nexar_comm_size(const nexar_comm_t *comm);

/**
 * Report the first failure found in the background (a dead peer, an abort by
 * a peer). It is the communicator's, not any one call's: a failed call's own
 * status and failed rank come from its completion, or for a blocking call
 * from nexar_last_error.
 *
 * @param comm  the communicator
 * @param info  NULL, or filled when there is a failure: status, failed_rank
 *              (the rank that died or aborted), op_seq 0, message (owned by
 *              the communicator, valid until it is destroyed)
 * @return NEXAR_OK when there is none; otherwise its status (and
 *         NEXAR_ERR_INVALID_ARGUMENT when comm is NULL)
 */
NEXAR_API nexar_status_t nexar_comm_get_async_error(nexar_comm_t *comm, nexar_completion_t *info);

/* ---- Seed: the discovery server that forms a cluster ------------------------ */

#define NEXAR_SEED_EVENT_LISTENING 1 /* the seed is up (message: address, CA fingerprint) */
#define NEXAR_SEED_EVENT_JOINED 2    /* a worker was admitted (rank: the one it asked for) */
#define NEXAR_SEED_EVENT_REFUSED 3   /* a worker was refused and told why */
#define NEXAR_SEED_EVENT_WELCOMED 4  /* the world is complete: ranks and certificates sent */
#define NEXAR_SEED_EVENT_FORMED 5    /* every rank reported its mesh formed */
#define NEXAR_SEED_EVENT_FAILED 6    /* formation failed (rank: the one to blame, or -1) */
/* An elastic seed's grows (docs/elastic.md). */
#define NEXAR_SEED_EVENT_GROWN 7       /* a grow admitted joiners (message: the sizes) */
#define NEXAR_SEED_EVENT_GROW_FAILED 8 /* a grow failed (rank: the one to blame, or -1) */

typedef struct nexar_seed_event {
  size_t struct_size;
  int32_t kind;        /* NEXAR_SEED_EVENT_* */
  int32_t rank;        /* see the kinds; -1 when none */
  uint32_t joined;     /* workers admitted so far */
  uint32_t world_size; /* workers expected */
  const char *message; /* never NULL; valid only during the callback */
} nexar_seed_event_t;

/**
 * Receives a seed's events. Runs on the seed's own thread; must return
 * quickly and must not stop the seed.
 *
 * @param user_data  opts->event_user_data
 * @param event      the event; owned by nexar, valid only during the call
 */
typedef void (*nexar_seed_event_fn)(void *user_data, const nexar_seed_event_t *event);

/**
 * Options for a seed. Initialise with nexar_seed_options_init, then change
 * fields. The struct only grows at the end. Strings are copied.
 */
typedef struct nexar_seed_options {
  size_t struct_size;
  const char *listen_address;    /* "ip:port", a concrete address; default "127.0.0.1:0" */
  uint32_t world_size;           /* NEXAR_WORLD_SIZE; required (1..1024) */
  uint32_t open;                 /* NEXAR_SEED_OPEN: 1 admits remote workers without a token */
  const char *cluster_token;     /* NEXAR_CLUSTER_TOKEN */
  const char *token_file;        /* NEXAR_CLUSTER_TOKEN_FILE; read when cluster_token is unset */
  const char *ca_dir;            /* NEXAR_SEED_CA_DIR: ca.pem + ca-key.pem (0600), made if absent */
  uint64_t formation_timeout_ms; /* NEXAR_FORMATION_TIMEOUT_SECS; default 60 s, at most 1e6 s */
  nexar_seed_event_fn on_event;  /* optional */
  void *event_user_data;
  /* Elastic membership (docs/elastic.md): stay up after formation and admit
   * joiners into the running world through nexar_comm_grow. */
  uint32_t elastic;        /* NEXAR_SEED_ELASTIC=1; default 0 */
  uint32_t max_world_size; /* NEXAR_MAX_WORLD_SIZE: no grow past it; 0 = 1024 */
} nexar_seed_options_t;

/**
 * Fill opts with defaults, then apply the NEXAR_* environment variables named
 * above.
 *
 * @param opts         the caller's struct, written
 * @param struct_size  sizeof(nexar_seed_options_t) as the caller knows it
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when opts is NULL, struct_size
 *         is not valid, or an environment value does not parse
 */
NEXAR_API nexar_status_t nexar_seed_options_init(nexar_seed_options_t *opts, size_t struct_size);

/**
 * Start a seed: bind, then admit workers on a thread of its own until the
 * world is complete or the formation timeout passes. Without a token it
 * admits only workers on this host, unless opts->open is set.
 *
 * @param out   on success the seed, owned by the caller (release with
 *              nexar_seed_stop); NULL on failure
 * @param opts  options (copied), or NULL for defaults plus environment
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (out NULL, bad options), or
 *         why the seed could not start (binding, the token file, the CA
 *         directory), with a message
 */
NEXAR_API nexar_status_t nexar_seed_start(nexar_seed_t **out, const nexar_seed_options_t *opts);

/**
 * The address the seed actually bound.
 *
 * @param seed  the seed
 * @return "host:port", owned by the seed, valid until nexar_seed_stop; NULL
 *         when seed is NULL
 */
NEXAR_API const char *nexar_seed_address(const nexar_seed_t *seed);

/**
 * Wait up to timeout_ms for formation to end. When it has ended, *ended (if
 * not NULL) is set to 1 and the result is returned: NEXAR_OK once every rank
 * reported its mesh formed, else the failure (NEXAR_ERR_TIMEOUT when the
 * formation timeout passed; the message is in nexar_last_error_message).
 * While it is still forming, *ended is 0 and NEXAR_ERR_TIMEOUT is returned.
 *
 * @param seed        the seed
 * @param timeout_ms  how long to wait; 0 only looks
 * @param ended       NULL, or set to 1 when formation has ended, else 0
 * @return as above; NEXAR_ERR_INVALID_ARGUMENT when seed is NULL
 */
NEXAR_API nexar_status_t nexar_seed_wait(nexar_seed_t *seed, uint32_t timeout_ms, int32_t *ended);

/**
 * Close every connection and release the seed.
 *
 * @param seed  the seed (invalid afterwards); NULL is ignored
 */
NEXAR_API void nexar_seed_stop(nexar_seed_t *seed);

/* ---- Logging ------------------------------------------------------------------ */

/**
 * Receives one log line.
 *
 * @param user_data  the pointer given to nexar_set_log_callback
 * @param level      NEXAR_LOG_*
 * @param line       the text nexar would otherwise print to stderr, without
 *                   the trailing newline ("nexar[host:pid:rRANK] warn: ...");
 *                   owned by nexar, valid only during the call
 */
typedef void (*nexar_log_fn)(void *user_data, int32_t level, const char *line);

/**
 * Send nexar's log lines (those enabled by NEXAR_LOG_LEVEL, default warn) to
 * fn instead of stderr; fn == NULL restores stderr. Process-wide.
 *   - fn may be called from any nexar thread, including the I/O thread: it
 *     must return quickly and must not block (queue the line and return).
 *     Calls are serialized: fn never runs on two threads at once.
 *   - Lines that nexar logs while fn runs on that thread go to stderr.
 *   - Once this returns, the previous callback is not running and is never
 *     called again.
 *
 * @param fn         the callback, or NULL for stderr
 * @param user_data  passed back to fn
 * @return NEXAR_OK; NEXAR_ERR_WOULD_DEADLOCK when called from inside fn
 */
NEXAR_API nexar_status_t nexar_set_log_callback(nexar_log_fn fn, void *user_data);

/* ---- Statistics --------------------------------------------------------------- */

/** Counters of a communicator's engine (shared by communicators split from it). */
typedef struct nexar_stats {
  size_t struct_size;
  uint64_t bytes_sent;        /* payload bytes handed to QUIC (shared memory: shm_bytes_sent) */
  uint64_t bytes_received;    /* payload bytes that arrived over QUIC */
  uint64_t messages_sent;     /* messages sent, over QUIC and shared memory */
  uint64_t messages_received; /* messages received, over QUIC and shared memory */
  uint64_t streams_opened;    /* QUIC streams opened by this engine, all peers */
  uint64_t streams_accepted;  /* QUIC streams opened by peers */
  uint64_t pending_tags;      /* (peer, tag) match state alive right now */
  uint64_t unexpected_bytes;  /* arrived before their receive, buffered now */
  uint64_t connections;       /* live QUIC connections */

  /* RPC (nexar_rpc_call) */
  uint64_t rpc_requests_served;   /* RPC requests answered by this engine (any outcome) */
  uint64_t rpc_responses_dropped; /* RPC responses nobody waited for (late, cancelled, unknown) */

  /* Relay (sparse topologies) */
  uint64_t relay_bytes_sent;      /* payload bytes this engine sent to non-neighbours via relay */
  uint64_t relay_bytes_forwarded; /* payload bytes this engine forwarded for other ranks */
  uint64_t relay_frames_dropped;  /* malformed, misrouted or undeliverable relay frames */
  uint64_t relay_bytes_held;      /* bytes held now for forwarding (bounded per neighbour) */

  /* ---- Packet protection. Diagnostics: may change before 1.0. ----
   * These count internal techniques (which AES-GCM implementation sealed a
   * packet, whether payload skipped a copy); they keep their place, but may
   * change meaning or read 0 in a later version. */
  uint64_t packets_fast_aead;     /* QUIC packets sealed or opened with ipsec-mb's AES-GCM rather
                                     than GnuTLS's (0 without libipsec-mb or with NEXAR_FAST_AEAD=0) */
  uint64_t bytes_opened_in_place; /* received payload bytes decrypted straight into the posted
                                     receive's buffer instead of being copied there (packets
                                     of 16 KiB or more on the ipsec-mb path; loopback) */
  uint64_t bytes_sealed_in_place; /* sent payload bytes encrypted straight from the caller's
                                     buffer instead of being copied into the packet first
                                     (messages of 16 KiB or more on the ipsec-mb path) */
  /* ---- End of diagnostics. ---- */

  /* Same-host path */
  uint64_t shm_pairs;          /* peers reached through shared memory */
  uint64_t shm_bytes_sent;     /* payload bytes written into shared memory (not in bytes_sent) */
  uint64_t shm_bytes_received; /* payload bytes read from peers' shared memory */
  uint64_t shm_collectives;    /* collectives run on shared memory, reading the peers' segments */
  uint64_t shm_bytes_by_reference; /* payload bytes peers read straight from this rank's
                                      nexar_mem_alloc buffers (messages and collectives) */

  /* Hostile or broken peers (docs/security.md); each also logs a warning */
  uint64_t connections_refused; /* refused before carrying data: a certificate from another CA,
                                   expired or not yet valid, for another cluster or rank; a wrong
                                   ALPN or cipher; a hello that claims another rank */
  uint64_t protocol_violations; /* connections closed because the peer broke the wire protocol:
                                   a malformed or oversized frame, a finished or reset stream,
                                   QUIC stream or flow-control limits exceeded */

  /* Same-host path, continued */
  uint64_t shm_bytes_read_directly; /* payload bytes collectives copied straight out of same-host
                                       peers' processes (NEXAR_SHM_CMA) */
} nexar_stats_t;

/**
 * Read the counters of the communicator's engine.
 *
 * @param comm   the communicator
 * @param stats  the caller's struct; the caller sets stats->struct_size to
 *               sizeof(nexar_stats_t) as it knows it; only the fields that
 *               fit are written, and struct_size becomes the size filled
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm or stats is NULL or
 *         stats->struct_size is too small
 */
NEXAR_API nexar_status_t nexar_comm_get_stats(nexar_comm_t *comm, nexar_stats_t *stats);

/* ---- Polled completion ------------------------------------------------------- */

/**
 * Polled mode: run up to max queued callbacks of this communicator on the
 * calling thread, waiting up to timeout_ms (0 = do not wait, -1 = no limit is
 * refused: every wait is bounded) for the first one.
 *
 * @param comm        a communicator made with NEXAR_COMPLETION_POLLED
 * @param max         the most callbacks to run
 * @param timeout_ms  how long to wait for the first one, >= 0
 * @return the number run (>= 0), or a negative status:
 *         NEXAR_ERR_INVALID_ARGUMENT (comm NULL, timeout_ms < 0, or not in
 *         polled mode)
 */
NEXAR_API int32_t nexar_comm_poll(nexar_comm_t *comm, uint32_t max, int32_t timeout_ms);

/**
 * Polled mode: a file descriptor that is readable while callbacks are waiting
 * for nexar_comm_poll, for use with poll/epoll.
 *
 * @param comm  the communicator
 * @return the descriptor, owned by the communicator (do not read, write or
 *         close it; valid until nexar_comm_destroy); -1 in thread mode or
 *         when comm is NULL
 */
NEXAR_API int nexar_comm_event_fd(const nexar_comm_t *comm);

/* ---- Point-to-point ---------------------------------------------------------- */

/**
 * Send bytes to rank dest with a tag. Messages between one pair with one tag
 * arrive in send order. Completes once the peer's transport has acknowledged
 * every byte (the buffer may then be reused).
 *
 * @param comm       the communicator
 * @param buf        the bytes, owned by the caller, read until done has
 *                   returned; may be NULL when bytes is 0
 * @param bytes      message size, at most 4 GiB
 * @param dest       the receiving rank (may be this rank)
 * @param tag        any value; matched by the receiver
 * @param done       completion callback, or NULL to block until the operation
 *                   completes (see "Completion" above)
 * @param user_data  passed back to done
 * @return with done: NEXAR_OK when the operation started (done will run), or
 *         the reason it was refused (done will not run). Without done: the
 *         operation's final status (its failed rank and number are in
 *         nexar_last_error).
 *         Refusals: NEXAR_ERR_INVALID_ARGUMENT, NEXAR_ERR_INVALID_RANK,
 *         NEXAR_ERR_ABORTED, NEXAR_ERR_CLOSED, NEXAR_ERR_WOULD_DEADLOCK.
 *         Failures: NEXAR_ERR_PEER_FAILED (failed_rank is dest),
 *         NEXAR_ERR_TIMEOUT (p2p_timeout_ms), NEXAR_ERR_ABORTED,
 *         NEXAR_ERR_CLOSED.
 */
NEXAR_API nexar_status_t nexar_send(nexar_comm_t *comm, const void *buf, size_t bytes,
                                    uint32_t dest, uint32_t tag, nexar_done_fn done,
                                    void *user_data);

/**
 * Receive the next message from rank src with this tag into buf. A message of
 * another size completes with NEXAR_ERR_SIZE_MISMATCH (and is consumed).
 *
 * @param comm       the communicator
 * @param buf        where the message goes, owned by the caller, written
 *                   until done has returned; may be NULL when bytes is 0
 * @param bytes      the expected message size, at most 4 GiB
 * @param src        the sending rank (may be this rank)
 * @param tag        the tag the sender used
 * @param done       completion callback, or NULL to block until the operation
 *                   completes (see "Completion" above)
 * @param user_data  passed back to done
 * @return with done: NEXAR_OK when the operation started (done will run), or
 *         the reason it was refused (done will not run). Without done: the
 *         operation's final status (its failed rank and number are in
 *         nexar_last_error).
 *         Refusals as for nexar_send. Failures: NEXAR_ERR_SIZE_MISMATCH,
 *         NEXAR_ERR_PEER_FAILED (failed_rank is src), NEXAR_ERR_TIMEOUT
 *         (p2p_timeout_ms), NEXAR_ERR_ABORTED (failed_rank is the rank that
 *         aborted), NEXAR_ERR_CLOSED.
 */
NEXAR_API nexar_status_t nexar_recv(nexar_comm_t *comm, void *buf, size_t bytes, uint32_t src,
                                    uint32_t tag, nexar_done_fn done, void *user_data);

/* ---- Collectives (counts are element counts) ---------------------------------- */

/*
 * Every collective must be called by every rank of the communicator, in the
 * same order on every rank (ranks that disagree get NEXAR_ERR_MISMATCH, never
 * a hang). Semantics are MPI's (docs/collectives.md): count is in elements of
 * dtype, blocks are ordered by rank, sendbuf is only read and recvbuf only
 * written (both owned by the caller and in use until done has returned),
 * count == 0 completes at once. The common parameters:
 *
 * @param comm       the communicator
 * @param dtype      NEXAR_DTYPE_*
 * @param op         NEXAR_OP_* (reductions)
 * @param root       the root rank (rooted collectives)
 * @param done       completion callback, or NULL to block until the operation
 *                   completes (see "Completion" above)
 * @param user_data  passed back to done
 * @return with done: NEXAR_OK when the operation started (done will run), or
 *         the reason it was refused (done will not run): NEXAR_ERR_INVALID_ARGUMENT
 *         (comm NULL, unknown dtype or op, a NULL buffer this rank needs, a
 *         count that overflows), NEXAR_ERR_INVALID_RANK (root), NEXAR_ERR_ABORTED,
 *         NEXAR_ERR_CLOSED, NEXAR_ERR_WOULD_DEADLOCK. Without done: the
 *         operation's final status (its failed rank and number are in
 *         nexar_last_error). Failures: NEXAR_ERR_TIMEOUT (collective_timeout_ms,
 *         barrier_timeout_ms; failed_rank is the rank waited for, when known),
 *         NEXAR_ERR_PEER_FAILED,
 *         NEXAR_ERR_ABORTED (failed_rank is the rank that aborted),
 *         NEXAR_ERR_MISMATCH, NEXAR_ERR_CLOSED.
 */

/**
 * Reduce count elements across ranks with op; every rank gets the result.
 * sendbuf == recvbuf reduces in place. Float results are bit-identical on
 * every rank.
 *
 * @param sendbuf  count elements
 * @param recvbuf  count elements: the result
 */
NEXAR_API nexar_status_t nexar_allreduce(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                         nexar_done_fn done, void *user_data);
/**
 * Copy root's count elements to every rank.
 *
 * @param buf  count elements: read on root, written elsewhere
 */
NEXAR_API nexar_status_t nexar_broadcast(nexar_comm_t *comm, void *buf, size_t count,
                                         nexar_dtype_t dtype, uint32_t root, nexar_done_fn done,
                                         void *user_data);
/**
 * Reduce count elements across ranks with op into root's recvbuf.
 * sendbuf == recvbuf reduces in place.
 *
 * @param sendbuf  count elements
 * @param recvbuf  count elements on root (the result); ignored elsewhere
 */
NEXAR_API nexar_status_t nexar_reduce(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                      uint32_t root, nexar_done_fn done, void *user_data);
/**
 * Every rank gets every rank's block, ordered by rank.
 *
 * @param sendbuf  count elements: this rank's block
 * @param recvbuf  count * size elements
 */
NEXAR_API nexar_status_t nexar_allgather(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, nexar_dtype_t dtype, nexar_done_fn done,
                                         void *user_data);
/**
 * Reduce recvcount * size elements across ranks with op; rank r gets block r
 * of the result.
 *
 * @param sendbuf    recvcount * size elements
 * @param recvbuf    recvcount elements
 * @param recvcount  elements per block
 */
NEXAR_API nexar_status_t nexar_reduce_scatter(nexar_comm_t *comm, const void *sendbuf,
                                              void *recvbuf, size_t recvcount, nexar_dtype_t dtype,
                                              nexar_op_t op, nexar_done_fn done, void *user_data);
/**
 * Rank r sends block j of its sendbuf to rank j, which stores it as block r
 * of its recvbuf.
 *
 * @param sendbuf  count * size elements
 * @param recvbuf  count * size elements
 * @param count    elements per block
 */
NEXAR_API nexar_status_t nexar_alltoall(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, nexar_dtype_t dtype, nexar_done_fn done,
                                        void *user_data);
/**
 * Root gets every rank's block, ordered by rank.
 *
 * @param sendbuf  count elements: this rank's block
 * @param recvbuf  count * size elements on root; ignored elsewhere
 */
NEXAR_API nexar_status_t nexar_gather(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, nexar_dtype_t dtype, uint32_t root,
                                      nexar_done_fn done, void *user_data);
/**
 * Rank r gets block r of root's sendbuf.
 *
 * @param sendbuf  count * size elements on root; ignored elsewhere
 * @param recvbuf  count elements
 */
NEXAR_API nexar_status_t nexar_scatter(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, nexar_dtype_t dtype, uint32_t root,
                                       nexar_done_fn done, void *user_data);
/**
 * Inclusive prefix reduction: rank r gets the reduction of ranks 0..r.
 *
 * @param sendbuf  count elements
 * @param recvbuf  count elements
 */
NEXAR_API nexar_status_t nexar_scan(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                    nexar_done_fn done, void *user_data);
/**
 * Exclusive prefix reduction: rank r > 0 gets the reduction of ranks
 * 0..r-1; rank 0's recvbuf is not written.
 *
 * @param sendbuf  count elements
 * @param recvbuf  count elements (may be NULL on rank 0)
 */
NEXAR_API nexar_status_t nexar_exscan(nexar_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, nexar_dtype_t dtype, nexar_op_t op,
                                      nexar_done_fn done, void *user_data);
/**
 * Complete once every rank has entered the barrier (barrier_timeout_ms
 * bounds the wait).
 */
NEXAR_API nexar_status_t nexar_barrier(nexar_comm_t *comm, nexar_done_fn done, void *user_data);

/**
 * Split into sub-communicators by color, ranks ordered by (key, rank). A
 * collective on comm: every rank calls it, in the same order as the other
 * collectives. The new communicator shares comm's engine and stays usable
 * if comm is destroyed first.
 *
 * @param comm       the communicator to split
 * @param color      ranks with the same color form one communicator
 * @param key        orders the ranks within it (ties: by rank in comm)
 * @param out        written before done runs (or before a blocking call
 *                   returns): the new communicator, owned by the caller
 *                   (release with nexar_comm_destroy); NULL on failure
 * @param done       completion callback, or NULL to block
 * @param user_data  passed back to done
 * @return as for the collectives above; also NEXAR_ERR_INVALID_ARGUMENT when
 *         out is NULL
 */
NEXAR_API nexar_status_t nexar_comm_split(nexar_comm_t *comm, uint32_t color, uint32_t key,
                                          nexar_comm_t **out, nexar_done_fn done, void *user_data);

/* ---- RPC ---------------------------------------------------------------------- */

/*
 * Remote procedure calls between the ranks of a communicator (see docs/rpc.md).
 * Requests and responses travel on RPC lanes of their own, never behind bulk
 * data. Serving is automatic: a registered handler runs for every request
 * that arrives, on the communicator's completion thread (in polled mode,
 * inside nexar_comm_poll), never on the I/O thread; handlers run one at a time
 * per engine, so a slow handler delays other callbacks, not the network.
 * Requests wait in a bounded queue; past it the caller is slowed by QUIC flow
 * control, and each caller keeps at most 1024 calls in flight per target
 * rank (more wait their turn inside their timeout).
 */

/** Where a handler puts its response. Owned by nexar; valid during the handler only. */
typedef struct nexar_rpc_reply nexar_rpc_reply_t;
/** A response delivered to the caller; freed with nexar_rpc_response_free. */
typedef struct nexar_rpc_response nexar_rpc_response_t;

/**
 * A handler: src_rank called function fn_id with request[0..request_len).
 * A handler may start asynchronous nexar operations; blocking ones
 * (done == NULL) return NEXAR_ERR_WOULD_DEADLOCK, like in any callback.
 *
 * @param user_data    the pointer given to nexar_rpc_register
 * @param src_rank     the calling rank
 * @param fn_id        the function called
 * @param request      the request bytes, owned by nexar, valid during the
 *                     call only (NULL when request_len is 0)
 * @param request_len  their number
 * @param reply        where the response goes (nexar_rpc_reply_*), owned by
 *                     nexar, valid during the call only
 * @return NEXAR_OK: the bytes put into reply (none: an empty response) go
 *         back to the caller. Anything else: the caller's call fails with
 *         NEXAR_ERR_RPC_FAILED, whose message carries the returned code and
 *         the text given to nexar_rpc_reply_set_error.
 */
typedef nexar_status_t (*nexar_rpc_handler_fn)(void *user_data, uint32_t src_rank, uint32_t fn_id,
                                               const void *request, size_t request_len,
                                               nexar_rpc_reply_t *reply);

/**
 * Serve fn_id on this communicator with handler (user_data is passed back).
 * Registering again replaces the handler; handler == NULL unregisters. Once
 * this returns (outside a callback), no invocation of the replaced handler is
 * running or will start. Requests for an fn_id without a handler fail at the
 * caller with NEXAR_ERR_RPC_NOT_REGISTERED.
 *
 * @param comm       the communicator
 * @param fn_id      the function served
 * @param handler    the handler, or NULL to unregister
 * @param user_data  passed back to handler; owned by the caller, who keeps it
 *                   valid until the handler is replaced or the communicator
 *                   destroyed
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm is NULL
 */
NEXAR_API nexar_status_t nexar_rpc_register(nexar_comm_t *comm, uint32_t fn_id,
                                            nexar_rpc_handler_fn handler, void *user_data);

/**
 * Inside a handler: a response buffer of len bytes to fill in place (replaces
 * any earlier one).
 *
 * @param reply  the handler's reply
 * @param len    the response size, at most 4 GiB
 * @return the buffer, owned by nexar, writable until the handler returns;
 *         NULL when len is 0 or on failure (NEXAR_ERR_NO_MEMORY, reply NULL,
 *         or len above the 4 GiB message limit; see nexar_last_error)
 */
NEXAR_API void *nexar_rpc_reply_alloc(nexar_rpc_reply_t *reply, size_t len);
/**
 * Inside a handler: copies data[0..len) as the response (replaces any
 * earlier one).
 *
 * @param reply  the handler's reply
 * @param data   the bytes (copied); may be NULL when len is 0
 * @param len    their number, at most 4 GiB
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (reply NULL, data NULL with
 *         len > 0, len above 4 GiB) or NEXAR_ERR_NO_MEMORY
 */
NEXAR_API nexar_status_t nexar_rpc_reply_set(nexar_rpc_reply_t *reply, const void *data,
                                             size_t len);
/**
 * Inside a handler: the message sent to the caller when the handler returns
 * a failure.
 *
 * @param reply    the handler's reply
 * @param message  the text (copied; at most 4 KiB kept); NULL clears it
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when reply is NULL
 */
NEXAR_API nexar_status_t nexar_rpc_reply_set_error(nexar_rpc_reply_t *reply, const char *message);

/**
 * Call fn_id on target_rank with request[0..request_len) (target_rank may be
 * this rank: served locally). On success *response (written before done runs,
 * or before a blocking call returns) holds the reply, which the caller frees
 * with nexar_rpc_response_free; on failure *response is NULL. Failures:
 * NEXAR_ERR_RPC_NOT_REGISTERED, NEXAR_ERR_RPC_FAILED (the handler's error),
 * NEXAR_ERR_TIMEOUT (no response within rpc_timeout_ms; a later response is
 * dropped), NEXAR_ERR_PEER_FAILED (failed_rank is the target), NEXAR_ERR_ABORTED,
 * NEXAR_ERR_CLOSED (the communicator was destroyed with the call pending).
 *
 * @param comm         the communicator
 * @param target_rank  the rank that serves the call
 * @param fn_id        the function called
 * @param request      the request bytes, owned by the caller, read until done
 *                     has returned; may be NULL when request_len is 0
 * @param request_len  their number, at most 4 GiB
 * @param response     where the response handle goes; must stay valid until
 *                     done has returned
 * @param done         completion callback, or NULL to block
 * @param user_data    passed back to done
 * @return as for nexar_send (refusals include NEXAR_ERR_INVALID_ARGUMENT when
 *         response is NULL); the failures are listed above
 */
NEXAR_API nexar_status_t nexar_rpc_call(nexar_comm_t *comm, uint32_t target_rank, uint32_t fn_id,
                                        const void *request, size_t request_len,
                                        nexar_rpc_response_t **response, nexar_done_fn done,
                                        void *user_data);

/**
 * The response bytes.
 *
 * @param response  a response from nexar_rpc_call
 * @return the bytes, owned by the response, valid until it is freed; NULL
 *         when the response is empty or response is NULL
 */
NEXAR_API const void *nexar_rpc_response_data(const nexar_rpc_response_t *response);

/**
 * The number of response bytes.
 *
 * @param response  a response from nexar_rpc_call
 * @return the size; 0 when response is NULL
 */
NEXAR_API size_t nexar_rpc_response_size(const nexar_rpc_response_t *response);

/**
 * Frees a response (from any thread).
 *
 * @param response  the response (invalid afterwards); NULL is ignored
 */
NEXAR_API void nexar_rpc_response_free(nexar_rpc_response_t *response);

/**
 * Writes the flight recorder as JSON: the recent operations of comm (or of
 * every communicator of this process when comm is NULL), each with its
 * numbers, arguments, algorithm, state, status and timestamps, and per
 * communicator its members, failed ranks, last queued / started / completed
 * collective numbers and peers. The recorder keeps the last NEXAR_FR_ENTRIES
 * operations of the process (default 2048, 0 turns it off); with
 * NEXAR_FR_DUMP_DIR set it also dumps there by itself when an operation
 * times out or a peer fails. `nexar-fr` merges the dumps of all ranks and
 * prints where they diverge.
 *
 * @param comm  the communicator, or NULL for every communicator
 * @param path  the file to write (replaced whole); NULL:
 *              NEXAR_FR_DUMP_DIR/nexar-fr-HOST-PID.json
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when path is NULL and
 *         NEXAR_FR_DUMP_DIR is unset or the file cannot be created;
 *         NEXAR_ERR_INTERNAL when writing it fails (nexar_last_error says why)
 */
NEXAR_API nexar_status_t nexar_flight_recorder_dump(nexar_comm_t *comm, const char *path);

/* ---- Failures: observe, revoke, agree, shrink (docs/failures.md) ----
 *
 * A member that dies, freezes past heartbeat_timeout, aborts or destroys its
 * communicator is a failed member: every collective on the communicator then
 * fails with NEXAR_ERR_PEER_FAILED naming it (failed_rank), at every rank;
 * point-to-point operations with the other members go on. The survivors
 * revoke, agree and shrink to go on without it. */

/**
 * The ranks this rank knows to have failed, in the order it learned of them;
 * the list only grows.
 *
 * @param comm      the communicator
 * @param ranks     receives up to capacity ranks (may be NULL when capacity is 0)
 * @param capacity  the room in ranks
 * @param count     receives the total number of failed ranks
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm or count is NULL
 */
NEXAR_API nexar_status_t nexar_comm_get_failed(nexar_comm_t *comm, uint32_t *ranks,
                                               uint32_t capacity, uint32_t *count);

/**
 * Acknowledge the first num_to_ack failures of nexar_comm_get_failed's list:
 * nexar_comm_agree no longer fails because of them.
 *
 * @param comm        the communicator
 * @param num_to_ack  how many (more than are known acknowledges all known)
 * @param num_acked   receives how many are acknowledged now (may be NULL)
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm is NULL
 */
NEXAR_API nexar_status_t nexar_comm_ack_failed(nexar_comm_t *comm, uint32_t num_to_ack,
                                               uint32_t *num_acked);

/** Called once per failed rank, with the cause (NEXAR_ERR_PEER_FAILED,
 * NEXAR_ERR_ABORTED), where the communicator's callbacks run. */
typedef void (*nexar_failure_fn)(void *user_data, nexar_comm_t *comm, uint32_t rank,
                                 nexar_status_t cause);

/**
 * Set (or with fn NULL remove) the failure callback of comm. It runs for
 * failures learned after this call.
 *
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm is NULL
 */
NEXAR_API nexar_status_t nexar_comm_set_failure_callback(nexar_comm_t *comm, nexar_failure_fn fn,
                                                         void *user_data);

/**
 * Revoke comm: non-collective and idempotent. Every pending and later
 * operation on comm fails with NEXAR_ERR_REVOKED at every live member, except
 * agree, shrink, get_failed, ack_failed, abort and destroy.
 *
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm is NULL
 */
NEXAR_API nexar_status_t nexar_comm_revoke(nexar_comm_t *comm);

/** 1 when comm was revoked (here or by a peer), else 0 (also for NULL). */
NEXAR_API int32_t nexar_comm_is_revoked(const nexar_comm_t *comm);

/**
 * Fault-tolerant agreement over the live members: *flags in = this rank's
 * bits, out = the AND over every live member's bits, the same at every
 * survivor. Completes with NEXAR_ERR_PEER_FAILED, uniformly, when a member
 * that not every survivor had acknowledged failed; the value is still agreed
 * then. NEXAR_ERR_EXCLUDED at a rank the others declared failed. Works on a
 * revoked communicator. Every live member calls it, in the same order
 * relative to its other agree and shrink calls.
 *
 * @param flags  in and out; must stay valid until done runs
 * @return NEXAR_OK (done runs once); NEXAR_ERR_INVALID_ARGUMENT when comm or
 *         flags is NULL
 */
NEXAR_API nexar_status_t nexar_comm_agree(nexar_comm_t *comm, uint64_t *flags, nexar_done_fn done,
                                          void *user_data);

/**
 * Collective over the survivors (works on a revoked communicator): agree on
 * the failed set, then *out = a new communicator of the survivors, ranks
 * renumbered in their old order, on the live connections. *out is set
 * before done runs; it stays NULL when the shrink fails.
 *
 * @return NEXAR_OK (done runs once); NEXAR_ERR_INVALID_ARGUMENT when comm or
 *         out is NULL
 */
NEXAR_API nexar_status_t nexar_comm_shrink(nexar_comm_t *comm, nexar_comm_t **out,
                                           nexar_done_fn done, void *user_data);

/* ---- Elastic membership ------------------------------------------------------
 * A seed started with elastic = 1 (NEXAR_SEED_ELASTIC=1) stays up after
 * formation. A process whose options have elastic = 1 (NEXAR_ELASTIC=1) joins
 * through nexar_comm_join / nexar_comm_init_from_env by waiting, bounded by
 * join_timeout_ms (NEXAR_JOIN_TIMEOUT_SECS), until the members admit it with
 * nexar_comm_grow. See docs/elastic.md. */

/**
 * How many processes wait to join (local and cheap: the elastic seed tells
 * every member whenever the number changes).
 *
 * @param comm   a communicator formed or grown with elastic = 1
 * @param count  receives the number (0 when the seed is gone)
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when comm or count is NULL;
 *         NEXAR_ERR_UNSUPPORTED when comm has no elastic seed
 */
NEXAR_API nexar_status_t nexar_comm_pending_joins(nexar_comm_t *comm, uint32_t *count);

/**
 * Collective over the members: admit up to max_new waiting processes (every
 * member gets the same number); *out = the grown communicator, old ranks keep
 * their numbers, new ranks are appended. The joiners' nexar_comm_join returns
 * a handle to the same communicator. comm stays usable (destroy it when done
 * with it). A member failing during the grow fails it with
 * NEXAR_ERR_PEER_FAILED at every member (shrink, then grow again); a joiner
 * failing during the grow is not admitted. With done, done runs on a thread
 * of nexar's own.
 *
 * @param comm     every member's communicator (without failed members)
 * @param max_new  the most joiners to admit (0 admits none: a copy of comm)
 * @param out      receives the grown communicator; NULL when the grow fails
 * @return NEXAR_OK (done runs once); NEXAR_ERR_INVALID_ARGUMENT when comm or
 *         out is NULL; NEXAR_ERR_UNSUPPORTED when comm has no elastic seed.
 *         The grow's own outcome: NEXAR_ERR_PEER_FAILED (failed_rank names the
 *         member), NEXAR_ERR_CLOSED when the elastic seed is gone,
 *         NEXAR_ERR_TIMEOUT
 */
NEXAR_API nexar_status_t nexar_comm_grow(nexar_comm_t *comm, uint32_t max_new, nexar_comm_t **out,
                                         nexar_done_fn done, void *user_data);

/* ---- Gradient traffic: bucketed and compressed allreduce ------------------- */

/** One buffer of a bucketed call. */
typedef struct nexar_tensor {
  void *buf;    /* in place: input and result */
  size_t count; /* elements */
} nexar_tensor_t;

/**
 * Allreduce each of n tensors in place, fused into buckets of about
 * bucket_bytes that are reduced while the next ones are packed: small
 * tensors share a bucket, a large one is split across buckets. Each element
 * gets what nexar_allreduce of its tensor would give (integers exactly;
 * floats bit-identical on every rank, possibly differently rounded than a
 * per-tensor call because the algorithm follows the bucket's size). Every
 * rank passes the same counts in the same order; ranks that disagree get
 * NEXAR_ERR_MISMATCH at the first bucket that differs. Results are written
 * bucket by bucket after each bucket completes: after a failure, the tensors
 * of the failed bucket and of every later one are unchanged.
 *
 * @param comm          the communicator
 * @param tensors       n tensors (buf may be NULL only when count is 0)
 * @param n             how many
 * @param dtype         a NEXAR_DTYPE_*
 * @param op            a NEXAR_OP_*
 * @param bucket_bytes  the bucket size; 0: NEXAR_BUCKET_BYTES, default 25 MiB
 * @param done          completion callback (NULL: block)
 * @param user_data     passed to done
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (comm NULL, tensors NULL with
 *         n > 0, a NULL buf with count > 0, bad dtype or op, malformed
 *         NEXAR_BUCKET_BYTES). The tensors array and every buffer stay valid
 *         until done has returned.
 */
NEXAR_API nexar_status_t nexar_allreduce_bucketed(nexar_comm_t *comm, const nexar_tensor_t *tensors,
                                                  size_t n, nexar_dtype_t dtype, nexar_op_t op,
                                                  size_t bucket_bytes, nexar_done_fn done,
                                                  void *user_data);

#define NEXAR_COMPRESS_TOPK 1    /* the k largest magnitudes, with their indices */
#define NEXAR_COMPRESS_RANDOMK 2 /* k positions chosen by a seed every rank shares */

/** A gradient compressor with its error-feedback residual. */
typedef struct nexar_compressor nexar_compressor_t;

/**
 * A compressor for tensors of count elements of dtype (F32, F64, F16, BF16),
 * keeping k = max(1, ratio * count) elements per call, with its own error-
 * feedback residual (what was not sent is added to the next call's input).
 * The residual is kept in the tensor's type, in f32 for F16 and BF16. A
 * compressor serves one call at a time; it may be destroyed as soon as
 * nexar_allreduce_compressed has returned.
 *
 * @param out    receives the compressor
 * @param kind   NEXAR_COMPRESS_TOPK or NEXAR_COMPRESS_RANDOMK
 * @param ratio  the fraction kept, in (0, 1]
 * @param count  the tensor's elements, 1 to 2^32 - 1
 * @param dtype  NEXAR_DTYPE_F32, F64, F16 or BF16
 * @param seed   RandomK's positions follow it: the same on every rank
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT for any other value
 */
NEXAR_API nexar_status_t nexar_compressor_create(nexar_compressor_t **out, int32_t kind,
                                                 double ratio, size_t count, nexar_dtype_t dtype,
                                                 uint64_t seed);

/** Frees a compressor (NULL is ignored). */
NEXAR_API void nexar_compressor_destroy(nexar_compressor_t *compressor);

/**
 * Zeroes the residual (the call number, which picks RandomK's positions,
 * goes on).
 *
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT when compressor is NULL
 */
NEXAR_API nexar_status_t nexar_compressor_reset(nexar_compressor_t *compressor);

/**
 * recvbuf = the SUM over ranks of each rank's compressed (sendbuf +
 * residual): zero where no rank sent an element. The residual keeps what
 * was not sent. Values are not scaled (divide by the world size for a
 * mean). Compression happens in this call, on the calling thread; the
 * exchange after it. Every rank's compressor has the same parameters and
 * has made as many calls (checked: NEXAR_ERR_MISMATCH otherwise).
 *
 * @param comm        the communicator
 * @param sendbuf     count elements of dtype (may equal recvbuf)
 * @param recvbuf     count elements of dtype
 * @param count       must be the compressor's count
 * @param dtype       must be the compressor's dtype
 * @param compressor  the compressor
 * @param done        completion callback (NULL: block)
 * @param user_data   passed to done
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (NULL arguments, count or
 *         dtype other than the compressor's). The buffers stay valid until
 *         done has returned.
 */
NEXAR_API nexar_status_t nexar_allreduce_compressed(nexar_comm_t *comm, const void *sendbuf,
                                                    void *recvbuf, size_t count,
                                                    nexar_dtype_t dtype,
                                                    nexar_compressor_t *compressor,
                                                    nexar_done_fn done, void *user_data);

/* ---- Symmetric memory ---------------------------------------------------
 *
 * Buffers inside this rank's shared-memory segment. A message of 64 KiB or
 * more sent from one of them to a rank on the same host (point-to-point, or
 * inside a collective) travels by reference: the receiver copies it straight
 * out of this rank's segment, one copy instead of two. The send completes
 * once the receiver has read it. Any other buffer still works everywhere.
 * The segment's heap is what NEXAR_SHM_MAX_BYTES leaves after the rings (2
 * MiB per same-host peer); when shared memory is off, or the heap is full,
 * nexar_mem_alloc gives ordinary page-aligned memory (logged once at info),
 * which works the same, at the cost of the copy. The buffers belong to the
 * rank's engine: any communicator of it (its splits too) frees them, and they
 * are gone once the last of those is destroyed. Thread-safe. */

/**
 * Allocates bytes of symmetric memory (page-aligned, contents unspecified).
 *
 * @param comm   any communicator of this rank
 * @param bytes  more than 0
 * @param out    the buffer
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (NULL comm or out, bytes 0);
 *         NEXAR_ERR_NO_MEMORY
 */
NEXAR_API nexar_status_t nexar_mem_alloc(nexar_comm_t *comm, size_t bytes, void **out);

/**
 * Frees a buffer of nexar_mem_alloc (NULL: nothing).
 *
 * @return NEXAR_OK; NEXAR_ERR_INVALID_ARGUMENT (NULL comm, or ptr not from
 *         nexar_mem_alloc of this rank's engine, or freed already)
 */
NEXAR_API nexar_status_t nexar_mem_free(nexar_comm_t *comm, void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* NEXAR_H */
