

def test_a_tree_nested_deeper_than_python_recurses_is_removed(tmp_path) -> None:
    import os

    from trainyard.backends.jobdirs import remove

    root = tmp_path / "jobdir"
    os.mkdir(root)
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(1500):  # a task's `mkdir a && cd a`, over and over
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    remove(root)
    assert not root.exists()
