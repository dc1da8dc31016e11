# bash completion for verlctl                                 -*- shell-script -*-
#
# Installed as share/bash-completion/completions/verlctl, where bash-completion
# loads it on first use. From a checkout: `source completion/verlctl.bash`. Works
# with bash-completion (_init_completion, _filedir, _command_offset) and without
# it (plain COMP_WORDS and compgen).
#
# Keep in step with verlctl's parser (verld/ctl/cli.py, COMMON and SPEC):
# tests/test_completion.py fails on a command or option completed here but not
# there, or the other way round.

# _verlctl_files CUR: file names
_verlctl_files()
{
    if declare -F _filedir >/dev/null; then
        _filedir
    else
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -f -- "$1")
    fi
}

# _verlctl_sockets CUR: sockets (and directories, to get to them), then verld's
# default socket and the instances' /run/verld/INSTANCE/verld.sock that exist
_verlctl_sockets()
{
    local f
    local -a found=()
    _verlctl_files "$1"
    for f in "${COMPREPLY[@]}"; do
        [[ -S $f || -d $f ]] && found+=("$f")
    done
    for f in /run/verld/verld.sock /run/verld/*/verld.sock; do
        [[ -S $f && $f == "$1"* && " ${found[*]} " != *" $f "* ]] && found+=("$f")
    done
    COMPREPLY=("${found[@]}")
}

# _verlctl_value COMMAND OPTION CUR: complete OPTION's value (COMMAND is empty
# before the command); status 1 when OPTION takes no value
_verlctl_value()
{
    case $1:$2 in
        *:-s | *:--socket) _verlctl_sockets "$3" ;;
        *:--config | call:--file) _verlctl_files "$3" ;;
        logs:--level) mapfile -t COMPREPLY < <(compgen -W 'debug info warning error' -- "$3") ;;
        ping:-c | ping:--count | ping:-i | ping:--interval | ping:--timeout) ;;
        call:--hex | call:--text | call:--timeout | call:--retry) ;;
        logs:-n | logs:--lines | logs:-u | logs:--unit) ;;
        top:--interval) ;;
        *) return 1 ;;
    esac
    return 0
}

# _verlctl_words: without bash-completion, words/cword/cur/prev from COMP_WORDS,
# with readline's "--opt" "=" "value" joined back and split into prev and cur
_verlctl_words()
{
    local i
    words=()
    cword=0
    for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
        if ((i > 1)) && [[ ${COMP_WORDS[i - 1]} == = && ${COMP_WORDS[i - 2]} == --* ]]; then
            words[-1]+=${COMP_WORDS[i]}
        elif ((i > 0)) && [[ ${COMP_WORDS[i]} == = && ${COMP_WORDS[i - 1]} == --* ]]; then
            words[-1]+='='
        else
            words+=("${COMP_WORDS[i]}")
        fi
        ((i == COMP_CWORD)) && cword=$((${#words[@]} - 1))
    done
    cur=${words[cword]-}
    prev=${words[cword - 1]-}
    if [[ $cur == --*=* ]]; then
        prev=${cur%%=*}
        cur=${cur#*=}
        split=true
    fi
}

_verlctl()
{
    local cur prev words cword split=false
    COMPREPLY=()
    if declare -F _init_completion >/dev/null; then
        _init_completion -s || return
    else
        _verlctl_words
    fi

    local commands='status ping call events monitor logs metrics top reconnect reload inhibit'
    local common='-h --help -s --socket --config --json'

    # the command: the first word that is neither an option nor an option's value
    local i cmd=''
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            -s | --socket | --config) ((i++)) ;;
            -*) ;;
            *)
                cmd=${words[i]}
                break
                ;;
        esac
    done

    # inhibit -- COMMAND ARG...: the command, then its own completion
    if [[ $cmd == inhibit ]]; then
        local j seen=false
        for ((j = 1; j < COMP_CWORD; j++)); do
            if [[ $seen == true && ${COMP_WORDS[j]} == -- ]]; then
                if ((j + 1 == COMP_CWORD)); then
                    mapfile -t COMPREPLY < <(compgen -c -- "$cur")
                elif declare -F _command_offset >/dev/null; then
                    _command_offset $((j + 1))
                else
                    _verlctl_files "$cur"
                fi
                return
            fi
            [[ ${COMP_WORDS[j]} == inhibit ]] && seen=true
        done
    fi

    if [[ $split == true || $prev == -* ]] && _verlctl_value "$cmd" "$prev" "$cur"; then
        return
    fi
    [[ $split == true ]] && return

    local opts=$common
    case $cmd in
        '') opts+=' --version' ;;
        ping) opts+=' -c --count -i --interval --timeout' ;;
        call) opts+=' --hex --text --file --timeout --retry --wait --no-reply' ;;
        monitor) opts+=' --raw' ;;
        top) opts+=' --interval' ;;
        logs) opts+=' -n --lines -f --follow --level --journal -u --unit' ;;
        inhibit) opts+=' --' ;;
    esac
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
    elif [[ -z $cmd ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$commands" -- "$cur")
    elif [[ $cmd == inhibit && -z $cur ]]; then
        COMPREPLY=(--)
    fi
} &&
    complete -F _verlctl verlctl

# ex: filetype=sh
