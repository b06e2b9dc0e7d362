"""rollyard-codegolf: a code-golf environment whose programs run in a bubblewrap sandbox."""
