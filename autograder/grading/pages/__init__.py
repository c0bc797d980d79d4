"""The pages an instructor and a student see of a submission (the formgrader, the feedback), safe whatever the
submission holds. Its rooms, each importing only those above it in this list:

    inert       what a student's code displayed and what they wrote, made harmless before a page renders it
    escaping    what nbgrader prints from the gradebook (ids, names, paths, comments) as text, and a nonce on
                the scripts of nbgrader's own templates
    policy      the Content-Security-Policy on both pages, and the server extension that sends it
"""
