"""Store backends, imported as ``discovery_sync.backends.<name>``; connect() loads them lazily.

The roles every backend has, and the module holding each (``memory.py`` holds them all in one):

    role            module       file                     etcd           kube
    --------------  -----------  -----------------------  -------------  ---------------------
    the Discovery   backend.py   FileDiscovery            EtcdDiscovery  KubeDiscovery
    options, env    options.py   OPTIONS                  OPTIONS        OPTIONS
    wire client     wire.py      read_file, write_record  EtcdGateway    KubeApi
    key layout      layout.py    StoreLayout              KeyLayout      spec_data, parse_data
    liveness        liveness.py  Heartbeat                LeaseKeeper    is_served, ready_from_*
    watch producer  watcher.py   DirectoryNotifier        BucketStream   ResourceStream
    served view     view.py      BucketView               (none)         KubeDaemon

* wire client: talks to the store; key layout: where a record lives, key or name <-> identity;
  liveness: how readers know an owner is alive; watch producer: the threads turning store
  changes into notifications; served view: what this reader serves, pushing changes to feeds.
* etcd has no served view: reads go to the server and each watcher reconciles its own feed.
* Helpers of one backend keep their own names: file's directory, survey (one listing), rescan
  (the rescan thread and its schedule), sight (judging liveness or not), own (this client's
  files), cohort (claims and fencing), garbage (collect_garbage), timing, doctor, locks,
  softlock, failover, missed, mounts, permissions, names (which names are records), owner_lock
  and owners (liveness from the kernel) and sweep (removal of the dead); kube's identity, served
  (the index the view serves from), summary (what the view keeps of an object), keeper
  (the connection state, and applying a deleted CR again), refusals (what a 401/403/404 means
  and what to do) and access (the permissions doctor reviews).
  tests/test_repository.py checks that every name in the table exists where it says.
"""
