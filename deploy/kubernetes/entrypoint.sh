#!/bin/sh
# The entrypoint of both images (student.Dockerfile, instructor.Dockerfile): prepares the server, then
# runs its command.
#
# 1. Names for uids. The hub runs each student's server as a uid of their own, which no image's
#    /etc/passwd lists; but nbgrader's submit names a submission after the account it runs as
#    (nbgrader.utils.get_username), and the instructors' `nbgrader collect` names it after the account
#    owning it (autograder/grading/exchange.py). So this server's own uid gets the user's name (USER,
#    set by the hub's pre_spawn_hook) if /etc/passwd has no entry for it, and an instructors' server
#    gets every student's (SEQCOURSE_PASSWD, from the same hook): nss_wrapper adds them to what this
#    server's processes see of /etc/passwd. Only the uid counts: a student who renames themselves in
#    their own server gets nothing collected under that name (the exchange compares the two).
# 2. Instructors' image only (it holds /opt/seqcourse/.seqcourse-image): the course folder
#    (/srv/seqcourse, a volume shared by the instructors' servers) gets the course's code from this
#    image whenever the image is another build than the one that last filled it: each top-level entry
#    of the image's copy replaces the folder's. What grading writes there (gradebook.db, submitted/,
#    autograded/, feedback/, grades.csv, .autograder/) is not in the image, and stays. Edits to the
#    code inside the folder are replaced by the next image: change the course in git, build again.
# 3. It says so if the exchange's root is not mode 1777.
set -eu

image=${SEQCOURSE_IMAGE_COPY:-/opt/seqcourse}
course=${SEQCOURSE_COURSE:-/srv/seqcourse}
exchange=${SEQCOURSE_EXCHANGE:-/srv/nbgrader/exchange}
etc_passwd=${SEQCOURSE_ETC_PASSWD:-/etc/passwd}
etc_group=${SEQCOURSE_ETC_GROUP:-/etc/group}
stamp=.seqcourse-image

if [ -f "$image/$stamp" ] && [ -d "$course" ] && [ -w "$course" ] && ! cmp -s "$image/$stamp" "$course/$stamp"; then
    echo "seqcourse: putting this image's course code into $course" >&2
    for entry in "$image"/* "$image"/.[!.]*; do
        [ -e "$entry" ] || continue
        name=$(basename "$entry")
        [ "$name" = "$stamp" ] && continue
        rm -rf "${course:?}/$name"
        cp -R --preserve=mode,timestamps "$entry" "$course/$name"
    done
    cp "$image/$stamp" "$course/$stamp"  # last: a sync cut short is done again at the next start
fi

uid=$(id -u)
gid=$(id -g)
own_passwd=""
own_group=""
if ! awk -F: -v uid="$uid" '$3 == uid { found = 1 } END { exit !found }' "$etc_passwd"; then
    name=${USER:-${JUPYTERHUB_USER:-jovyan}}
    case $name in
        "" | [.-]* | *[!A-Za-z0-9_.-]*) name=jovyan ;;  # the hub allows no other names (values.yaml)
    esac
    own_passwd="$name:x:$uid:$gid::${HOME:-/home/jovyan}:/bin/bash
"
    awk -F: -v gid="$gid" '$3 == gid { found = 1 } END { exit !found }' "$etc_group" || own_group="$name:x:$gid:
"
fi
if [ -n "$own_passwd" ] || [ -n "${SEQCOURSE_PASSWD:-}" ]; then
    nss=$(mktemp -d)
    { cat "$etc_passwd"; printf '%s' "$own_passwd" "${SEQCOURSE_PASSWD:-}"; } > "$nss/passwd"
    { cat "$etc_group"; printf '%s' "$own_group"; } > "$nss/group"
    lib=""
    for candidate in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
        [ -e "$candidate" ] && lib=$candidate && break
    done
    if [ -n "$lib" ]; then
        export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}" NSS_WRAPPER_PASSWD="$nss/passwd" NSS_WRAPPER_GROUP="$nss/group"
    else
        echo "seqcourse: libnss_wrapper is not installed: nbgrader cannot name uid $uid, or the students' uids" >&2
    fi
fi
unset SEQCOURSE_PASSWD

if [ -d "$exchange" ]; then
    mode=$(stat -c %a "$exchange")
    if [ "$mode" != 1777 ]; then
        echo "seqcourse: the exchange $exchange is mode $mode, not 1777: students cannot submit until it is" \
             "(chmod 1777 it on the file server)" >&2
    fi
fi

exec "$@"
