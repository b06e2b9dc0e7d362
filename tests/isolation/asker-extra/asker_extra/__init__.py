MARK = "asker-extra"
