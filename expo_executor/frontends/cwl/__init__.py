"""expocloud-cwl: CWL workflows through cwltool, every command on expocloud workers."""
