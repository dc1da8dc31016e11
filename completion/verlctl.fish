# fish completion for verlctl
#
# Installed as share/fish/vendor_completions.d/verlctl.fish, where fish loads it
# on first use. From a checkout: `source completion/verlctl.fish`.
#
# Keep in step with verlctl's parser (verld/ctl/cli.py, COMMON and SPEC):
# tests/test_completion.py checks the commands, their help and their options.

set -l commands status ping call events monitor logs metrics top reconnect reload inhibit

# sockets (and directories, to get to them), then verld's default socket and the
# instances' /run/verld/INSTANCE/verld.sock that exist
function __verlctl_sockets
    set -l token (string replace -r -- '^--socket=' '' (commandline -ct))
    set -l paths "$token"*
    for f in $paths
        if test -d $f
            echo $f/
        else if test -S $f
            echo $f
        end
    end
    for f in /run/verld/verld.sock /run/verld/*/verld.sock
        if test -S $f; and string match -q -- "$token*" $f; and not contains -- $f $paths
            echo $f
        end
    end
end

# true while the command line is past `inhibit --`
function __verlctl_inhibit_command
    set -l tokens (commandline -opc)
    set -l i (contains -i -- inhibit $tokens); or return 1
    contains -- -- $tokens[$i..-1]
end

# after `inhibit --`: COMMAND, then what fish completes for it
function __verlctl_inhibit_complete
    set -l tokens (commandline -opc)
    set -l i (contains -i -- inhibit $tokens)
    set -l j (contains -i -- -- $tokens[$i..-1])
    set -l rest $tokens[(math $i + $j)..-1]
    complete -C (string join ' ' -- (string escape -- $rest) (commandline -ct))
end

complete -c verlctl -f
complete -c verlctl -n '__verlctl_inhibit_command' -xa '(__verlctl_inhibit_complete)'

# verlctl's options and every command's
complete -c verlctl -n 'not __verlctl_inhibit_command' -s h -l help -d 'show help and exit'
complete -c verlctl -n 'not __verlctl_inhibit_command' -s s -l socket -rfa '(__verlctl_sockets)' -d "verld's API socket"
complete -c verlctl -n 'not __verlctl_inhibit_command' -l config -rF -d 'take the socket from this config'
complete -c verlctl -n 'not __verlctl_inhibit_command' -l json -d 'JSON output'

complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -l version -d 'show the version and exit'

complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a status -d 'link state, counters, latency'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a ping -d 'ping the device through verld'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a call -d 'send one request, print the reply'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a events -d 'print device and link events until Ctrl-C'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a monitor -d 'live traffic, decoded per frame'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a logs -d 'recent daemon log records'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a metrics -d 'Prometheus text exposition'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a top -d 'live view of the link, its rates and every program using the device (q quits)'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a reconnect -d 'drop and reopen the device link (admin)'
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a reload -d "re-read the daemon's config (admin)"
complete -c verlctl -n "not __fish_seen_subcommand_from $commands" -a inhibit -d 'let go of the device port for another program, e.g. a flasher (admin)'

complete -c verlctl -n '__fish_seen_subcommand_from ping' -s c -l count -x -d 'stop after N pings'
complete -c verlctl -n '__fish_seen_subcommand_from ping' -s i -l interval -x -d 'seconds between pings'
complete -c verlctl -n '__fish_seen_subcommand_from ping' -l timeout -x -d 'seconds per ping'

complete -c verlctl -n '__fish_seen_subcommand_from call' -l hex -x -d 'request bytes as hex, e.g. 01aabb'
complete -c verlctl -n '__fish_seen_subcommand_from call' -l text -x -d 'request as text (UTF-8)'
complete -c verlctl -n '__fish_seen_subcommand_from call' -l file -rF -d 'request bytes from a file'
complete -c verlctl -n '__fish_seen_subcommand_from call' -l timeout -x -d 'seconds per try'
complete -c verlctl -n '__fish_seen_subcommand_from call' -l retry -x -d 'extra tries after a timeout'
complete -c verlctl -n '__fish_seen_subcommand_from call' -l wait -d 'wait for the link if it is down'
complete -c verlctl -n '__fish_seen_subcommand_from call' -l no-reply -d 'a command the device does not answer: send it once, await nothing'

complete -c verlctl -n '__fish_seen_subcommand_from monitor' -l raw -d 'raw bytes as read/written, garbage too'

complete -c verlctl -n '__fish_seen_subcommand_from top' -l interval -x -d 'seconds between looks (default 1)'

complete -c verlctl -n '__fish_seen_subcommand_from logs' -s n -l lines -x -d 'how many records'
complete -c verlctl -n '__fish_seen_subcommand_from logs' -s f -l follow -d 'keep printing new records'
complete -c verlctl -n '__fish_seen_subcommand_from logs' -l level -xa 'debug info warning error' -d 'the lowest level shown'
complete -c verlctl -n '__fish_seen_subcommand_from logs' -l journal -d 'read the systemd journal, not the daemon'
complete -c verlctl -n '__fish_seen_subcommand_from logs' -s u -l unit -x -d "with --journal: this unit's entries"

complete -c verlctl -n '__fish_seen_subcommand_from inhibit; and not __verlctl_inhibit_command' -a -- -d 'run COMMAND with the port let go, then give it back'
