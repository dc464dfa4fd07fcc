# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_spool_global_optspecs
    string join \n s/spool= backend= allow-network-fs json q/quiet v/verbose h/help V/version
end

function __fish_spool_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_spool_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_spool_using_subcommand
    set -l cmd (__fish_spool_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c spool -n "__fish_spool_needs_command" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_needs_command" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_needs_command" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_needs_command" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_needs_command" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_needs_command" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_needs_command" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_needs_command" -f -a "init" -d 'Create a new, empty spool'
complete -c spool -n "__fish_spool_needs_command" -f -a "enqueue" -d 'Add a payload (or a batch of payloads) to the spool'
complete -c spool -n "__fish_spool_needs_command" -f -a "drain" -d 'Print pending items as NDJSON, in enqueue order (removes nothing)'
complete -c spool -n "__fish_spool_needs_command" -f -a "list" -d 'List pending items with their attempts, next retry and last error'
complete -c spool -n "__fish_spool_needs_command" -f -a "ls" -d 'List pending items with their attempts, next retry and last error'
complete -c spool -n "__fish_spool_needs_command" -f -a "show" -d 'Show one item\'s metadata, or with --raw its exact payload bytes'
complete -c spool -n "__fish_spool_needs_command" -f -a "done" -d 'Remove pending items by id (an operator\'s decision)'
complete -c spool -n "__fish_spool_needs_command" -f -a "hold" -d 'Put pending items on hold: kept, listed and counted, but not replayed'
complete -c spool -n "__fish_spool_needs_command" -f -a "release" -d 'Release held items so that replay attempts them again'
complete -c spool -n "__fish_spool_needs_command" -f -a "attempts" -d 'Show or set an item\'s durable attempt count'
complete -c spool -n "__fish_spool_needs_command" -f -a "size" -d 'Print the number of pending items (held ones included)'
complete -c spool -n "__fish_spool_needs_command" -f -a "stats" -d 'Show depth, held and dead counts, oldest age, attempts, sizes, bounds'
complete -c spool -n "__fish_spool_needs_command" -f -a "shape" -d 'Show how many items are stuck, how old they are and why (qshape)'
complete -c spool -n "__fish_spool_needs_command" -f -a "top" -d 'Watch a spool live: counts, depth and delivery rate, shape, items'
complete -c spool -n "__fish_spool_needs_command" -f -a "replay" -d 'Deliver pending items to a command (--exec) or a URL (--url), or push them (--push)'
complete -c spool -n "__fish_spool_needs_command" -f -a "watch" -d 'Probe the link; replay the spool as soon as it comes back'
complete -c spool -n "__fish_spool_needs_command" -f -a "serve" -d 'Receive pushes from other spools, and single payloads, over HTTP(S)'
complete -c spool -n "__fish_spool_needs_command" -f -a "clients" -d 'Show the clients that pushed into this spool, and where each stands'
complete -c spool -n "__fish_spool_needs_command" -f -a "compact" -d 'Rewrite an NDJSON spool without dead records, or VACUUM a SQLite spool'
complete -c spool -n "__fish_spool_needs_command" -f -a "checkpoint" -d 'Checkpoint a SQLite spool\'s WAL and report how far it got'
complete -c spool -n "__fish_spool_needs_command" -f -a "verify" -d 'Check a spool\'s integrity and report what is wrong and where'
complete -c spool -n "__fish_spool_needs_command" -f -a "dlq" -d 'Inspect, export, requeue or purge dead letters'
complete -c spool -n "__fish_spool_needs_command" -f -a "export" -d 'Write every pending, held, dead and retained delivered item as NDJSON records'
complete -c spool -n "__fish_spool_needs_command" -f -a "import" -d 'Add the records of `spool export` to this spool (all or nothing)'
complete -c spool -n "__fish_spool_needs_command" -f -a "config" -d 'Show or change the settings the spool remembers (max-depth, on-full, retain, uuid)'
complete -c spool -n "__fish_spool_needs_command" -f -a "completions" -d 'Print a shell completion script'
complete -c spool -n "__fish_spool_needs_command" -f -a "man" -d 'Print the man page (roff), or a subcommand\'s page'
complete -c spool -n "__fish_spool_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spool -n "__fish_spool_using_subcommand init" -l max-depth -d 'Refuse enqueues beyond N pending items (remembered by the spool)' -r
complete -c spool -n "__fish_spool_using_subcommand init" -l on-full -d 'At max-depth: reject new items (exit 75), or drop-oldest (evict to the dead letters)' -r -f -a "reject\t''
drop-oldest\t''"
complete -c spool -n "__fish_spool_using_subcommand init" -l retain -d 'Keep delivered items for this long (e.g. 7d; off: delete them, the default)' -r
complete -c spool -n "__fish_spool_using_subcommand init" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand init" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand init" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand init" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand init" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand init" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand init" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand init" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -s f -l file -d 'Read the payload (or the batch) from FILE' -r -F
complete -c spool -n "__fish_spool_using_subcommand enqueue" -s k -l key -d 'Idempotency key of a single payload' -r
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l max-payload -d 'Refuse a payload larger than SIZE (exit 65)' -r
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l max-depth -d 'Enforce this depth bound for this call instead of the spool\'s own' -r
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l wait-for-space -d 'On a full spool, wait up to DURATION for room instead of failing' -r
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l group -d 'Ordering group: replay delivers the items of a group in enqueue order ("" is none)' -r
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l coalesce-key -d 'Replace pending items with this coalesce key that were never attempted ("" is none)' -r
complete -c spool -n "__fish_spool_using_subcommand enqueue" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l stdin -d 'Read the payload (or the batch) from stdin; the default for --lines and --ndjson'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l key-from-payload -d 'Use the payload\'s content hash (sha256:<hex>) as its key'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l lines -d 'One payload per input line (a batch, one atomic commit)'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l ndjson -d 'One JSON object per input line: {"payload": ..., "key": ...} (a batch, one atomic commit)'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand enqueue" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand drain" -s n -l limit -d 'Print at most N items' -r
complete -c spool -n "__fish_spool_using_subcommand drain" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand drain" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand drain" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand drain" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand drain" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand drain" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand drain" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand drain" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand list" -s n -l limit -d 'Show at most N items (after filtering)' -r
complete -c spool -n "__fish_spool_using_subcommand list" -s k -l key -d 'Only the item(s) with this idempotency key' -r
complete -c spool -n "__fish_spool_using_subcommand list" -l min-attempts -d 'Only items tried at least N times' -r
complete -c spool -n "__fish_spool_using_subcommand list" -s g -l group -d 'Only items of ordering group G (enqueue --group)' -r
complete -c spool -n "__fish_spool_using_subcommand list" -l state -d 'Which items: pending (not held), held, delivered (retained), dead' -r -f -a "pending\t''
held\t''
delivered\t''
dead\t''"
complete -c spool -n "__fish_spool_using_subcommand list" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand list" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand list" -l due -d 'Only items a replay would attempt now (not held, not backing off, not waiting behind their group)'
complete -c spool -n "__fish_spool_using_subcommand list" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand list" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand list" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand list" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand list" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand ls" -s n -l limit -d 'Show at most N items (after filtering)' -r
complete -c spool -n "__fish_spool_using_subcommand ls" -s k -l key -d 'Only the item(s) with this idempotency key' -r
complete -c spool -n "__fish_spool_using_subcommand ls" -l min-attempts -d 'Only items tried at least N times' -r
complete -c spool -n "__fish_spool_using_subcommand ls" -s g -l group -d 'Only items of ordering group G (enqueue --group)' -r
complete -c spool -n "__fish_spool_using_subcommand ls" -l state -d 'Which items: pending (not held), held, delivered (retained), dead' -r -f -a "pending\t''
held\t''
delivered\t''
dead\t''"
complete -c spool -n "__fish_spool_using_subcommand ls" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand ls" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand ls" -l due -d 'Only items a replay would attempt now (not held, not backing off, not waiting behind their group)'
complete -c spool -n "__fish_spool_using_subcommand ls" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand ls" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand ls" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand ls" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand ls" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand ls" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand show" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand show" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand show" -l raw -d 'Write exactly the payload bytes to stdout'
complete -c spool -n "__fish_spool_using_subcommand show" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand show" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand show" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand show" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand show" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand done" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand done" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand done" -l force -d 'Also remove items in flight to a push receiver (it is told to skip their numbers)'
complete -c spool -n "__fish_spool_using_subcommand done" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand done" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand done" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand done" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand done" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand done" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand hold" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand hold" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand hold" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand hold" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand hold" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand hold" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand hold" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand hold" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand release" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand release" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand release" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand release" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand release" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand release" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand release" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand attempts" -l set -d 'Set the count to N' -r
complete -c spool -n "__fish_spool_using_subcommand attempts" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand attempts" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand attempts" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand attempts" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand attempts" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand attempts" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand attempts" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand attempts" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand size" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand size" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand size" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand size" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand size" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand size" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand size" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand size" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand stats" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand stats" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand stats" -l prometheus -d 'Print the Prometheus text format (for node_exporter\'s textfile collector)'
complete -c spool -n "__fish_spool_using_subcommand stats" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand stats" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand stats" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand stats" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand stats" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand shape" -l by -d 'The rows: error (cause class of the last error), group, attempts, key-prefix' -r -f -a "error\t''
group\t''
attempts\t''
key-prefix\t''"
complete -c spool -n "__fish_spool_using_subcommand shape" -l state -d 'Which items: pending (not held), held, dead, delivered (retained)' -r -f -a "pending\t''
held\t''
dead\t''
delivered\t''"
complete -c spool -n "__fish_spool_using_subcommand shape" -l buckets -d 'The number of age buckets (the last one has no upper edge)' -r
complete -c spool -n "__fish_spool_using_subcommand shape" -l first -d 'The first bucket edge; each next one is double the previous' -r
complete -c spool -n "__fish_spool_using_subcommand shape" -l top -d 'Show at most N value rows; the rest are summed in an (other) row' -r
complete -c spool -n "__fish_spool_using_subcommand shape" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand shape" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand shape" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand shape" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand shape" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand shape" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand shape" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand shape" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand top" -l interval -d 'Time between refreshes' -r
complete -c spool -n "__fish_spool_using_subcommand top" -l filter -d 'Start with this filter, as if typed after `/`' -r
complete -c spool -n "__fish_spool_using_subcommand top" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand top" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand top" -l read-only -d 'Show only: refuse hold, release, requeue and mark done'
complete -c spool -n "__fish_spool_using_subcommand top" -l once -d 'Run one refresh without a terminal and print its cost as JSON (benchmarks)'
complete -c spool -n "__fish_spool_using_subcommand top" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand top" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand top" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand top" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand top" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand top" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand replay" -l exec -d 'Run CMD once per item, the payload on stdin' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l reject-exit -d 'Exit codes of the --exec command that reject an item for good' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l url -d 'POST (or --method) each payload to URL' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l method -d 'HTTP method for --url' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l content-type -d 'Content-Type of the request body' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -s H -l header -d 'Extra request header, \'Name: value\' (repeatable; --url, --push)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l retry-status -d '4xx statuses to retry instead of rejecting (comma-separated)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l timeout -d 'Bound on one delivery attempt' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l cacert -d 'Also trust the certificate(s) in FILE (PEM) for https://' -r -F
complete -c spool -n "__fish_spool_using_subcommand replay" -l push -d 'Push the items to the push receiver at URL, in numbered batches' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l batch -d 'Entries per push request' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l batch-bytes -d 'Bytes per push request body, before compression (one entry may exceed it)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l pipeline -d 'Push requests in flight at once (1 waits for each acknowledgement)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l max-attempts -d 'Failed attempts (cumulative, across runs) before an item is dead-lettered' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l backoff-base -d 'Wait after the first failed attempt (doubles per attempt, with jitter)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l backoff-max -d 'Longest wait between attempts (a Retry-After may ask for more)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l limit -d 'Attempt at most N items' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l deadline -d 'Start no new attempt after DURATION (for cron)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l wait -d 'If another replay holds the spool, wait up to DURATION for it' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l concurrency -d 'Keep up to N deliveries in flight at once' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l commit-every -d 'Commit delivered items as done in groups of N (a crash may redeliver up to N-1)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l lease -d 'PostgreSQL: how long a claimed item stays leased to this replayer' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l poll -d 'With --follow: look for new items at least this often' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l idle-exit -d 'With --follow: exit after DURATION without anything to attempt' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l events -d 'Write one NDJSON line per recorded outcome to FILE (appended; - for stdout)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l on-dead -d 'Run CMD once for every item dead-lettered in the run, its JSON on stdin' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -l hook-timeout -d 'Bound on one --on-dead run (its process group is killed after it)' -r
complete -c spool -n "__fish_spool_using_subcommand replay" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand replay" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand replay" -l shell -d 'Run the --exec command through /bin/sh -c (shell syntax allowed)'
complete -c spool -n "__fish_spool_using_subcommand replay" -l compress -d 'Compress push request bodies with gzip (Content-Encoding: gzip)'
complete -c spool -n "__fish_spool_using_subcommand replay" -l ignore-backoff -d 'Attempt items even when their next retry time has not come'
complete -c spool -n "__fish_spool_using_subcommand replay" -l ordered -d 'Stop at the first item that fails and stays queued (nothing overtakes it)'
complete -c spool -n "__fish_spool_using_subcommand replay" -l dry-run -d 'Show what the run would do (attempt, or dead-letter items at their budget); change nothing'
complete -c spool -n "__fish_spool_using_subcommand replay" -l follow -d 'Keep running: deliver new items as they are enqueued, until stopped'
complete -c spool -n "__fish_spool_using_subcommand replay" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand replay" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand replay" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand replay" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand replay" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand replay" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand watch" -l probe -d 'What to probe: tcp://HOST:PORT, http(s)://URL or exec:CMD' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l probe-expect -d 'HTTP probes only: text the answer\'s body must contain' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l probe-timeout -d 'Bound on one probe' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l interval -d 'Time between probes' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l failure-threshold -d 'Failed probes in a row before the link counts as offline' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l online-threshold -d 'Good probes in a row before the link counts as online' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l reconnect-attempts -d 'Reconnect attempts (probes) per online sequence before giving up' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l retry-delay -d 'Wait between failed reconnect attempts' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l on-online -d 'Run CMD when the link comes back, before the replay' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l on-offline -d 'Run CMD when the link goes away (and at startup when it is down)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l replay-interval -d 'Also replay this often while online (0: only when the link comes back)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l metrics-file -d 'Write Prometheus metrics to FILE (replaced atomically)' -r -F
complete -c spool -n "__fish_spool_using_subcommand watch" -l exec -d 'Run CMD once per item, the payload on stdin' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l reject-exit -d 'Exit codes of the --exec command that reject an item for good' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l url -d 'POST (or --method) each payload to URL' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l method -d 'HTTP method for --url' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l content-type -d 'Content-Type of the request body' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -s H -l header -d 'Extra request header, \'Name: value\' (repeatable; --url, --push)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l retry-status -d '4xx statuses to retry instead of rejecting (comma-separated)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l timeout -d 'Bound on one delivery attempt' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l cacert -d 'Also trust the certificate(s) in FILE (PEM) for https://' -r -F
complete -c spool -n "__fish_spool_using_subcommand watch" -l push -d 'Push the items to the push receiver at URL, in numbered batches' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l batch -d 'Entries per push request' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l batch-bytes -d 'Bytes per push request body, before compression (one entry may exceed it)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l pipeline -d 'Push requests in flight at once (1 waits for each acknowledgement)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l max-attempts -d 'Failed attempts (cumulative, across runs) before an item is dead-lettered' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l backoff-base -d 'Wait after the first failed attempt (doubles per attempt, with jitter)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l backoff-max -d 'Longest wait between attempts (a Retry-After may ask for more)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l limit -d 'Attempt at most N items' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l deadline -d 'Start no new attempt after DURATION (for cron)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l wait -d 'If another replay holds the spool, wait up to DURATION for it' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l concurrency -d 'Keep up to N deliveries in flight at once' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l commit-every -d 'Commit delivered items as done in groups of N (a crash may redeliver up to N-1)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l lease -d 'PostgreSQL: how long a claimed item stays leased to this replayer' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l events -d 'Write one NDJSON line per recorded outcome to FILE (appended; - for stdout)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l on-dead -d 'Run CMD once for every item dead-lettered in the run, its JSON on stdin' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -l hook-timeout -d 'Bound on one --on-dead run (its process group is killed after it)' -r
complete -c spool -n "__fish_spool_using_subcommand watch" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand watch" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand watch" -l shell -d 'Run the --exec command through /bin/sh -c (shell syntax allowed)'
complete -c spool -n "__fish_spool_using_subcommand watch" -l compress -d 'Compress push request bodies with gzip (Content-Encoding: gzip)'
complete -c spool -n "__fish_spool_using_subcommand watch" -l ignore-backoff -d 'Attempt items even when their next retry time has not come'
complete -c spool -n "__fish_spool_using_subcommand watch" -l ordered -d 'Stop at the first item that fails and stays queued (nothing overtakes it)'
complete -c spool -n "__fish_spool_using_subcommand watch" -l dry-run -d 'Show what the run would do (attempt, or dead-letter items at their budget); change nothing'
complete -c spool -n "__fish_spool_using_subcommand watch" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand watch" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand watch" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand watch" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand watch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand watch" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand serve" -l listen -d 'Address to listen on: IP:PORT or HOST:PORT (port 0: any free port)' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l token-file -d 'Accept only requests bearing a token from FILE' -r -F
complete -c spool -n "__fish_spool_using_subcommand serve" -l tls-cert -d 'Serve HTTPS with this PEM certificate chain (needs --tls-key)' -r -F
complete -c spool -n "__fish_spool_using_subcommand serve" -l tls-key -d 'The PEM private key for --tls-cert' -r -F
complete -c spool -n "__fish_spool_using_subcommand serve" -l max-body -d 'Largest request body, as sent and once decompressed' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l max-payload -d 'Largest payload (a push entry over it is rejected; an item is 413)' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l max-entries -d 'Most entries in one push request (more is 413: send smaller batches)' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l memory-budget -d 'Memory that all requests may hold at once (over it: 503 + Retry-After)' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l header-timeout -d 'Time for a request head to arrive; also the keep-alive idle limit' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l request-timeout -d 'Time for a request body to arrive after its head' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l max-connections -d 'Most connections open at once (more wait to be accepted)' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l max-connections-per-peer -d 'Most connections open at once from one IP address (more are closed)' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -l commit-delay -d 'Sleep this long in every commit (simulates a slow disk; tests, benchmarks)' -r
complete -c spool -n "__fish_spool_using_subcommand serve" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand serve" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand serve" -l console -d 'Serve the browser console at /console/ (read-only without --token-file)'
complete -c spool -n "__fish_spool_using_subcommand serve" -l insecure-no-auth -d 'Listen on a non-loopback address without tokens (trusted networks only)'
complete -c spool -n "__fish_spool_using_subcommand serve" -l shared-keys -d 'One key space for every client and token: keys are stored as sent'
complete -c spool -n "__fish_spool_using_subcommand serve" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand serve" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand serve" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand serve" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand serve" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand clients" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand clients" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand clients" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand clients" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand clients" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand clients" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand clients" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand clients" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand compact" -l wait -d 'Wait up to DURATION for another process\'s lock, then exit 75' -r
complete -c spool -n "__fish_spool_using_subcommand compact" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand compact" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand compact" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand compact" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand compact" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand compact" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand compact" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand compact" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -l mode -d 'The checkpoint mode' -r -f -a "passive\t'Copy what can be copied without waiting'
full\t'Wait for writers, then copy everything readers allow'
restart\t'As full, then wait for readers so the WAL starts over'
truncate\t'As restart, then truncate the WAL file to zero bytes'"
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -l wait -d 'Wait up to DURATION for other connections (full, restart, truncate)' -r
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand checkpoint" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand verify" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand verify" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand verify" -l repair -d 'Cut a torn trailing line and rebuild a stale index (NDJSON) when that is all the damage'
complete -c spool -n "__fish_spool_using_subcommand verify" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand verify" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand verify" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand verify" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand verify" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand verify" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -f -a "list" -d 'List dead letters: id, key, attempts, when they died, last error, size, preview'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -f -a "show" -d 'Show one dead letter, or with --raw its exact payload bytes'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -f -a "export" -d 'Write every dead letter as NDJSON, a JSON array or CSV'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -f -a "requeue" -d 'Move dead letters back to pending (attempts reset, keys kept)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -f -a "purge" -d 'Delete dead letters for good (needs --yes)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and not __fish_seen_subcommand_from list show export requeue purge help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -s n -l limit -d 'Show at most N dead letters' -r
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -l raw -d 'Write exactly the payload bytes to stdout'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -l format -d 'The output format' -r -f -a "ndjson\t'One JSON object per line'
json\t'One JSON array'
csv\t'CSV with a header row'"
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -s o -l output -d 'Write to FILE (replaced atomically) instead of stdout' -r -F
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from export" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -l all -d 'Every dead letter'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from requeue" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -l all -d 'Every dead letter'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -l yes -d 'Really delete them'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from purge" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "list" -d 'List dead letters: id, key, attempts, when they died, last error, size, preview'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "show" -d 'Show one dead letter, or with --raw its exact payload bytes'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "export" -d 'Write every dead letter as NDJSON, a JSON array or CSV'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "requeue" -d 'Move dead letters back to pending (attempts reset, keys kept)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "purge" -d 'Delete dead letters for good (needs --yes)'
complete -c spool -n "__fish_spool_using_subcommand dlq; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spool -n "__fish_spool_using_subcommand export" -s o -l output -d 'Write to FILE (replaced atomically) instead of stdout' -r -F
complete -c spool -n "__fish_spool_using_subcommand export" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand export" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand export" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand export" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand export" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand export" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand export" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand export" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand import" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand import" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand import" -l identity -d 'Take the exporting spool\'s uuid and push state (fresh spools only)'
complete -c spool -n "__fish_spool_using_subcommand import" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand import" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand import" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand import" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand import" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand import" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand config" -l wait -d 'With --regenerate: if a replay holds the spool, wait up to DURATION' -r
complete -c spool -n "__fish_spool_using_subcommand config" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand config" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand config" -l regenerate -d 'Give the spool a new uuid (KEY must be uuid)'
complete -c spool -n "__fish_spool_using_subcommand config" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand config" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand config" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand config" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand config" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand config" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand completions" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand completions" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand completions" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand completions" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand completions" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand completions" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand completions" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand man" -s s -l spool -d 'The spool to use [default: $SPOOL_PATH, else ./spool.db]' -r -F
complete -c spool -n "__fish_spool_using_subcommand man" -l backend -d 'The backend of a spool being created (an existing spool keeps its own)' -r -f -a "sqlite\t'SQLite database (WAL mode)'
file\t'Append-only NDJSON file'"
complete -c spool -n "__fish_spool_using_subcommand man" -l allow-network-fs -d 'Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one'
complete -c spool -n "__fish_spool_using_subcommand man" -l json -d 'Print JSON: one object, or NDJSON for streams of items'
complete -c spool -n "__fish_spool_using_subcommand man" -s q -l quiet -d 'Print less on stderr: only errors (and why a replay failed)'
complete -c spool -n "__fish_spool_using_subcommand man" -s v -l verbose -d 'Print more on stderr'
complete -c spool -n "__fish_spool_using_subcommand man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c spool -n "__fish_spool_using_subcommand man" -s V -l version -d 'Print version'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "init" -d 'Create a new, empty spool'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "enqueue" -d 'Add a payload (or a batch of payloads) to the spool'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "drain" -d 'Print pending items as NDJSON, in enqueue order (removes nothing)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "list" -d 'List pending items with their attempts, next retry and last error'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "show" -d 'Show one item\'s metadata, or with --raw its exact payload bytes'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "done" -d 'Remove pending items by id (an operator\'s decision)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "hold" -d 'Put pending items on hold: kept, listed and counted, but not replayed'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "release" -d 'Release held items so that replay attempts them again'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "attempts" -d 'Show or set an item\'s durable attempt count'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "size" -d 'Print the number of pending items (held ones included)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "stats" -d 'Show depth, held and dead counts, oldest age, attempts, sizes, bounds'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "shape" -d 'Show how many items are stuck, how old they are and why (qshape)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "top" -d 'Watch a spool live: counts, depth and delivery rate, shape, items'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "replay" -d 'Deliver pending items to a command (--exec) or a URL (--url), or push them (--push)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "watch" -d 'Probe the link; replay the spool as soon as it comes back'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "serve" -d 'Receive pushes from other spools, and single payloads, over HTTP(S)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "clients" -d 'Show the clients that pushed into this spool, and where each stands'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "compact" -d 'Rewrite an NDJSON spool without dead records, or VACUUM a SQLite spool'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "checkpoint" -d 'Checkpoint a SQLite spool\'s WAL and report how far it got'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "verify" -d 'Check a spool\'s integrity and report what is wrong and where'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "dlq" -d 'Inspect, export, requeue or purge dead letters'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "export" -d 'Write every pending, held, dead and retained delivered item as NDJSON records'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "import" -d 'Add the records of `spool export` to this spool (all or nothing)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "config" -d 'Show or change the settings the spool remembers (max-depth, on-full, retain, uuid)'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "completions" -d 'Print a shell completion script'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "man" -d 'Print the man page (roff), or a subcommand\'s page'
complete -c spool -n "__fish_spool_using_subcommand help; and not __fish_seen_subcommand_from init enqueue drain list show done hold release attempts size stats shape top replay watch serve clients compact checkpoint verify dlq export import config completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c spool -n "__fish_spool_using_subcommand help; and __fish_seen_subcommand_from dlq" -f -a "list" -d 'List dead letters: id, key, attempts, when they died, last error, size, preview'
complete -c spool -n "__fish_spool_using_subcommand help; and __fish_seen_subcommand_from dlq" -f -a "show" -d 'Show one dead letter, or with --raw its exact payload bytes'
complete -c spool -n "__fish_spool_using_subcommand help; and __fish_seen_subcommand_from dlq" -f -a "export" -d 'Write every dead letter as NDJSON, a JSON array or CSV'
complete -c spool -n "__fish_spool_using_subcommand help; and __fish_seen_subcommand_from dlq" -f -a "requeue" -d 'Move dead letters back to pending (attempts reset, keys kept)'
complete -c spool -n "__fish_spool_using_subcommand help; and __fish_seen_subcommand_from dlq" -f -a "purge" -d 'Delete dead letters for good (needs --yes)'
